-- cancelled.lua: was this claim's key cancelled under it, while its holder
-- still runs? The worker's watch asks it of each running claim
-- (forum.coordinator.keeping), so a cancelled handler stops within a watch
-- interval rather than at its next heartbeat.
--
-- KEYS[1]  <tag>:claim:<key>
-- KEYS[2]  <tag>:done:<key>
-- KEYS[3]  <tag>:task:<key>   the job record (its "cancelled": cancel.lua's token)
-- KEYS[4]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  the claim key (unused; every keyed script takes it first)
-- ARGV[2]  the holder's token
-- ARGV[3]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 the token no longer holds the key and the key's done marker is
--          a cancel's (its token is the record's "cancelled"): the holder is
--          to stop, its job over;
--          0 otherwise: still held, or lost some other way (expired, taken
--          over, completed by a later holder), which the heartbeat finds.
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('GET', KEYS[1]) == ARGV[2] then
  return 0
end
local done = redis.call('GET', KEYS[2])
if done and done ~= ARGV[2] and done == redis.call('HGET', KEYS[3], 'cancelled') then
  return 1
end
return 0
