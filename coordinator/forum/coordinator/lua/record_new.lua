-- record_new.lua: write a key's first job record, unfenced (a producer's).
--
-- KEYS[1]  <tag>:task:<key>   the job record (hash of str fields -> bytes)
-- KEYS[2]  <tag>:epoch        the shard's state marker
-- (the job index's keys too, built from the tag: ix_enqueued in prelude.lua)
-- ARGV[1]  the claim key
-- ARGV[2]  the record's TTL in milliseconds, from now
-- ARGV[3]  the fields: a msgpack array field, value, field, value, ...
-- ARGV[4]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 written; 0 the key has a record already (a worker's: the
--          producer never overwrites what it wrote, but adds its "args" and
--          "enqueued" where absent and indexes the job if it is not yet:
--          producer_late in prelude.lua).
local lost = epoch_lost()
if lost then
  return lost
end
local fields = cmsgpack.unpack(ARGV[3])
if redis.call('EXISTS', KEYS[1]) == 1 then
  producer_late(KEYS[1], ARGV[1], fields, now_ms())
  return 0
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
ix_enqueued(KEYS[1], ARGV[1], now_ms())
return 1
