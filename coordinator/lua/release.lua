-- release.lua: give a key back without completing it; nothing is re-offered.
--
-- KEYS[1]  <ns>:claim:<key>
-- KEYS[2]  <ns>:job:<key>
-- KEYS[3]  <ns>:inflight
-- ARGV[1]  the claim key (member of KEYS[3])
-- ARGV[2]  the holder's token
--
-- Returns  1 released, 0 the token does not hold the key.
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
