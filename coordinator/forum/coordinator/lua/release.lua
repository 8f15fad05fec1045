-- release.lua: give a key back without completing it; nothing is re-offered.
-- With ARGV[5] > 0 the holder's attempt failed: the job's attempts record
-- says which attempt is next and from when (or that there is none), so every
-- copy of the job, on any node, is counted in one sequence (claim.lua).
--
-- KEYS[1]  <tag>:claim:<key>
-- KEYS[2]  <tag>:job:<key>
-- KEYS[3]  <tag>:inflight
-- KEYS[4]  <tag>:history:<key>  the key's history ("released" is pushed)
-- KEYS[5]  <tag>:attempts:<key>  the job's attempts (hash, coordinator.keys):
--                             next (the next attempt's number), due (Redis TIME
--                             ms before which it is not granted; -1: buried, no
--                             more attempts), revived (ARGV[7])
-- KEYS[6]  <tag>:task:<key>   the job record: the job is indexed queued
--                             (a plain release), retrying (due then) or
--                             dead (buried) (ix_move in prelude.lua)
-- KEYS[7]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  the claim key (member of KEYS[3])
-- ARGV[2]  the holder's token
-- ARGV[3]  the history's TTL in milliseconds
-- ARGV[4]  the attempts record's TTL in milliseconds (the done markers' retention)
-- ARGV[5]  "0": a plain release (the attempts record is not touched); else
--          the number of the attempt after the one that failed
-- ARGV[6]  with ARGV[5] > 0: milliseconds until that attempt is due, or "-1":
--          none is (the job is buried as a dead letter)
-- ARGV[7]  with ARGV[5] > 0: the dead letter the job was requeued from, ""
--          for none (claim.lua's ARGV[8])
-- ARGV[8]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
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
local now = now_ms()
redis.call('DEL', KEYS[1], KEYS[2])
ended(KEYS[4], ARGV[3], now, 'released', ARGV[2], held)
redis.call('ZREM', KEYS[3], ARGV[1])
if ARGV[5] ~= '0' then
  local due = '-1'
  if ARGV[6] ~= '-1' then
    due = string.format('%d', now + tonumber(ARGV[6]))
  end
  redis.call('HSET', KEYS[5], 'next', ARGV[5], 'due', due, 'revived', ARGV[7])
  redis.call('PEXPIRE', KEYS[5], ARGV[4])
  if due == '-1' then
    ix_move(KEYS[6], ARGV[1], 'dead', now)
  else
    ix_move(KEYS[6], ARGV[1], 'retrying', tonumber(due))
  end
else
  ix_move(KEYS[6], ARGV[1], 'queued', now)
end
return 1
