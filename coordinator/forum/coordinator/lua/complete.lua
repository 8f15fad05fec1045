-- complete.lua: finish a claim, leaving a done marker that turns away duplicates.
--
-- The done marker is the one key a completed job leaves for its retention:
-- the token alone (an integer: no allocation beyond the key). The claim's
-- history lines go to the history list, which lives history_ttl (ARGV[4]).
--
-- KEYS[1]  <tag>:claim:<key>
-- KEYS[2]  <tag>:done:<key>
-- KEYS[3]  <tag>:job:<key>
-- KEYS[4]  <tag>:inflight
-- KEYS[5]  <tag>:history:<key>  the key's history ("completed" is pushed)
-- KEYS[6]  <tag>:attempts:<key>  the job's attempts (deleted: the done marker
--                             turns every copy away from now on)
-- KEYS[7]  <tag>:task:<key>   the job record: the job is indexed done, or
--                             dead when the record says so (ix_move in
--                             prelude.lua; one HMGET reads both)
-- KEYS[8]  <tag>:counts       what the shard caught (hash): claims_lost is
--                             counted when a stale holder is refused (0)
-- KEYS[9]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  the claim key (member of KEYS[4])
-- ARGV[2]  the holder's token
-- ARGV[3]  done-marker TTL in milliseconds (LensConfig.retention)
-- ARGV[4]  the history's TTL in milliseconds; "0": no history
-- ARGV[5]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 completed now
--          2 this token completed the key before (a repeat after a lost reply)
--          0 the token does not hold the key: a stale holder
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  if redis.call('GET', KEYS[2]) == ARGV[2] then
    return 2
  end
  redis.call('HINCRBY', KEYS[8], 'claims_lost', 1)
  return 0
end
local held = redis.call('HMGET', KEYS[3], 'owner', 'attempt', 'since')
redis.call('DEL', KEYS[1], KEYS[3], KEYS[6])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
local now = now_ms()
ended(KEYS[5], ARGV[4], now, 'completed', ARGV[2], held)
redis.call('ZREM', KEYS[4], ARGV[1])
local record = redis.call('HMGET', KEYS[7], 'task', 'ix', 'state')
ix_move(KEYS[7], ARGV[1], record[3] == 'dead' and 'dead' or 'done', now, record)
return 1
