-- grab.lua: take an abandoned in-flight record for re-offer, for a while.
--
-- KEYS[1]  <tag>:claim:<key>
-- KEYS[2]  <tag>:done:<key>
-- KEYS[3]  <tag>:job:<key>
-- KEYS[4]  <tag>:inflight
-- KEYS[5]  <tag>:counts       what the shard caught (hash): reoffered is
--                             counted at the first grab of a record its holder
--                             let lapse (not one handed back for a retry, not
--                             a grab again after a reaper died or its write failed)
-- KEYS[6]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  the claim key (member of KEYS[4])
-- ARGV[2]  the reaper's lease on the grab, milliseconds
-- ARGV[3]  a grab id unique to this attempt
-- ARGV[4]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  {1, payload}  grabbed: write payload into the space, then call reaped.lua
--          {0}           nothing to do: not due, claimed again, done, or gone
--
-- Only one of many concurrent reapers gets {1, ...} for a due record: the grab
-- pushes the record's due time ARGV[2] into the future. Should the reaper die
-- before reaped.lua, the record falls due again and another reaper re-offers it.
local lost = epoch_lost()
if lost then
  return lost
end
local score = redis.call('ZSCORE', KEYS[4], ARGV[1])
if not score then
  return {0}
end
local now = now_ms()
if tonumber(score) > now then
  return {0}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
  -- Claimed again (or still held): due when that claim's lease ends.
  redis.call('ZADD', KEYS[4], now + math.max(pttl, 0), ARGV[1])
  return {0}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {0}
end
local held = redis.call('HMGET', KEYS[3], 'payload', 'handed', 'grab')
local payload = held[1]
if not payload then
  redis.call('ZREM', KEYS[4], ARGV[1])
  return {0}
end
if not held[2] and not held[3] then
  redis.call('HINCRBY', KEYS[5], 'reoffered', 1)
end
redis.call('HSET', KEYS[3], 'grab', ARGV[3])
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), ARGV[1])
return {1, payload}
