-- reaped.lua: drop an in-flight record once its grab was written back.
--
-- KEYS[1]  <tag>:claim:<key>
-- KEYS[2]  <tag>:job:<key>
-- KEYS[3]  <tag>:inflight
-- KEYS[4]  <tag>:history:<key>  the key's history ("reoffered" is pushed, with
--                             the token that handed the job back, 0 if none)
-- KEYS[5]  <tag>:task:<key>   the job record: the job is indexed queued,
--                             unless its record says dead (a dead letter
--                             written back) (ix_move in prelude.lua)
-- KEYS[6]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  the claim key (member of KEYS[3])
-- ARGV[2]  the grab id from grab.lua
-- ARGV[3]  the history's TTL in milliseconds
-- ARGV[4]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 dropped; 0 left alone because the key was claimed again (the
--          re-offered job was already taken: the record is the new claim's).
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('HGET', KEYS[2], 'grab') ~= ARGV[2] or redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local held = redis.call('HMGET', KEYS[2], 'owner', 'attempt', 'handed')
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
local now = now_ms()
push_history(KEYS[4], ARGV[3], {event(now, 'reoffered', held[3] or '0', held[2], held[1])})
if ix_settled(KEYS[5]) ~= 'dead' then
  ix_move(KEYS[5], ARGV[1], 'queued', now)
end
return 1
