-- extend.lua: renew a live claim's lease (the worker's heartbeat).
--
-- KEYS[1]  <tag>:claim:<key>
-- KEYS[2]  <tag>:inflight
-- KEYS[3]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  the claim key (member of KEYS[2])
-- ARGV[2]  the holder's token
-- ARGV[3]  new lease in milliseconds, counted from now
-- ARGV[4]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 extended (and the record's re-offer time moved with the lease),
--          0 the token does not hold the key.
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], 'XX', now_ms() + tonumber(ARGV[3]), ARGV[1])
return 1
