-- hand_back.lua: give a key back and schedule bytes to be written into the
-- space after a delay (a retry with backoff, a dead letter, a drained job).
-- Release and re-offer are one step, so at every instant the job is either
-- held or recorded for re-offer, until a reaper writes it back.
--
-- KEYS[1]  <tag>:claim:<key>
-- KEYS[2]  <tag>:job:<key>
-- KEYS[3]  <tag>:inflight
-- KEYS[4]  <tag>:history:<key>  the key's history ("handed_back" is pushed)
-- KEYS[5]  <tag>:task:<key>   the job record: the job is indexed as the
--                             record says it ended (dead, retrying), else
--                             queued from when the bytes are due (ix_move)
-- KEYS[6]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  the claim key (member of KEYS[3])
-- ARGV[2]  the holder's token
-- ARGV[3]  delay in milliseconds before the bytes are due
-- ARGV[4]  the bytes to write back
-- ARGV[5]  the history's TTL in milliseconds
-- ARGV[6]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 handed back now
--          2 this token handed the key back before (a repeat after a lost reply)
--          0 the token does not hold the key
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  if redis.call('HGET', KEYS[2], 'handed') == ARGV[2] then
    return 2
  end
  return 0
end
local held = redis.call('HMGET', KEYS[2], 'owner', 'attempt', 'since')
local now = now_ms()
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], 'grab')
ended(KEYS[4], ARGV[5], now, 'handed_back', ARGV[2], held)
redis.call('HSET', KEYS[2], 'payload', ARGV[4], 'handed', ARGV[2])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[1])
local settled, due = ix_settled(KEYS[5])
if settled == 'retrying' then
  ix_move(KEYS[5], ARGV[1], settled, due)
elseif settled then
  ix_move(KEYS[5], ARGV[1], settled, now)
else
  ix_move(KEYS[5], ARGV[1], 'queued', now + tonumber(ARGV[3]))
end
return 1
