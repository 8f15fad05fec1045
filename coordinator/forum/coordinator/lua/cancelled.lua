-- cancelled.lua: was this claim's key made done under it (a cancel), while
-- its holder still runs? The worker's watch asks it of each running claim
-- (forum.coordinator.keeping), so a cancelled handler stops within a watch
-- interval rather than at its next heartbeat.
--
-- KEYS[1]  <tag>:claim:<key>
-- KEYS[2]  <tag>:done:<key>
-- KEYS[3]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  the claim key (unused; every keyed script takes it first)
-- ARGV[2]  the holder's token
-- ARGV[3]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 the token no longer holds the key and the key is done with
--          another token (cancelled; or, once the holder's lease ran out,
--          completed by a later holder): the holder is to stop, its job over;
--          0 otherwise (still held, or lost without being done: the heartbeat
--          finds that).
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('GET', KEYS[1]) == ARGV[2] then
  return 0
end
local done = redis.call('GET', KEYS[2])
if done and done ~= ARGV[2] then
  return 1
end
return 0
