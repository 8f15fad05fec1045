-- record.lua: write fields of a key's job record, fenced by the live claim.
--
-- KEYS[1]  <tag>:claim:<key>  the live claim's token
-- KEYS[2]  <tag>:task:<key>   the job record (hash of str fields -> bytes)
-- KEYS[3]  <tag>:epoch        the shard's state marker
-- ARGV[1]  the claim key
-- ARGV[2]  the holder's token
-- ARGV[3]  the record's TTL in milliseconds, from now
-- ARGV[4]  the fields: a msgpack array field, value, field, value, ...
-- ARGV[5]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 written; 0 the token does not hold the key (nothing written: a
--          stale holder can never write a record).
--
-- The record keeps the fields not given (HSET), and field "token" is set to
-- the writer's token; a record whose token is older than the writer's (an
-- earlier attempt's, or an older holder's) is replaced as a whole. A record
-- with no token (a producer's, record_new.lua) is kept and added to. A
-- replaced record's "args", "enqueued" (the producer's) and "ix" (the job
-- index's) are kept; a "state" of done, dead or retrying (due then) moves
-- the job in the index (ix_move in prelude.lua).
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return 0
end
local kept = redis.call('HMGET', KEYS[2], 'token', 'args', 'enqueued', 'ix')
if kept[1] and tonumber(kept[1]) < tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[2])
  for i, name in ipairs({'args', 'enqueued', 'ix'}) do
    if kept[i + 1] then
      redis.call('HSET', KEYS[2], name, kept[i + 1])
    end
  end
end
redis.call('HSET', KEYS[2], 'token', ARGV[2], unpack(cmsgpack.unpack(ARGV[4])))
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local said = redis.call('HMGET', KEYS[2], 'state', 'due')
if said[1] == 'done' or said[1] == 'dead' then
  ix_move(KEYS[2], ARGV[1], said[1], now_ms())
elseif said[1] == 'retrying' then
  ix_move(KEYS[2], ARGV[1], 'retrying', math.floor(tonumber(said[2] or '0') * 1000))
end
return 1
