-- verify.lua: is this claim still the key's live claim, and for how long?
--
-- KEYS[1]  <tag>:claim:<key>
-- KEYS[2]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  the claim key (unused; every keyed script takes it first)
-- ARGV[2]  the holder's token
-- ARGV[3]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  the claim's remaining lease in milliseconds (>= 0) if ARGV[2] holds
--          the key, else -1.
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return -1
end
return math.max(redis.call('PTTL', KEYS[1]), 0)
