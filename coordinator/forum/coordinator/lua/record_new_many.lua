-- record_new_many.lua: write the first job record of each of many claim keys
-- of one shard, unfenced (a producer's batch: record_new.lua for each key,
-- in one call).
--
-- KEYS[1..n]  <tag>:task:<key> of each claim key (hashes of str fields -> bytes)
-- KEYS[n+1]   <tag>:epoch      the shard's state marker
-- (the job index's keys too, built from the tag: ix_enqueued in prelude.lua)
-- ARGV[1]  the records, in KEYS order: a msgpack array TTL, fields, TTL,
--          fields, ...; each TTL in milliseconds from now (a string), each
--          fields an array field, value, field, value, ...
-- ARGV[2]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  one integer per key, in KEYS order: 1 written; 0 the key has a
--          record already (a worker's: its args and enqueued added where
--          absent, as record_new.lua says).
local lost = epoch_lost()
if lost then
  return lost
end
local records = cmsgpack.unpack(ARGV[1])
local written = {}
local now = now_ms()
local skip = #ix_tag() + 7  -- '<tag>:task:' before the claim key
for i = 1, #KEYS - 1 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    producer_late(KEYS[i], string.sub(KEYS[i], skip), records[2 * i], now)
    written[i] = 0
  else
    redis.call('HSET', KEYS[i], unpack(records[2 * i]))
    redis.call('PEXPIRE', KEYS[i], records[2 * i - 1])
    ix_enqueued(KEYS[i], string.sub(KEYS[i], skip), now)
    written[i] = 1
  end
end
return written
