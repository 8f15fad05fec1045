-- release.lua: give a key back without completing it; nothing is re-offered.
--
-- KEYS[1]  <tag>:claim:<key>
-- KEYS[2]  <tag>:job:<key>
-- KEYS[3]  <tag>:inflight
-- KEYS[4]  <tag>:history:<key>  the key's history ("released" is pushed)
-- KEYS[5]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  the claim key (member of KEYS[3])
-- ARGV[2]  the holder's token
-- ARGV[3]  the history's TTL in milliseconds
-- ARGV[4]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 released, 0 the token does not hold the key.
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return 0
end
local held = redis.call('HMGET', KEYS[2], 'owner', 'attempt', 'since')
redis.call('DEL', KEYS[1], KEYS[2])
ended(KEYS[4], ARGV[3], now_ms(), 'released', ARGV[2], held)
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
