-- cancel.lua: turn a key into a done one, so that every copy of its job,
-- wherever it waits, is turned away as already done; and retire the fencing
-- token of the claim holding it, if one does, so its holder is refused from
-- now on.
--
-- KEYS[1]  <tag>:claim:<key>  the live claim, if any (deleted)
-- KEYS[2]  <tag>:done:<key>   the done marker
-- KEYS[3]  <tag>:fence        the last fencing token issued in the shard
-- KEYS[4]  <tag>:job:<key>    the in-flight record (the holder's owner,
--                             attempt and since; one whose lease ran out is
--                             ended here)
-- KEYS[5]  <tag>:task:<key>   the job record: gains field "cancelled" = token;
--                             a job of a task is indexed cancelled (ix_move)
-- KEYS[6]  <tag>:history:<key>  the key's history ("cancelled" is pushed)
-- KEYS[7]  <tag>:epoch        the shard's state marker
-- ARGV[1]  the claim key
-- ARGV[2]  done-marker TTL in milliseconds (LensConfig.retention; a new job
--          record's too)
-- ARGV[3]  the history's TTL in milliseconds; "0": no history
-- ARGV[4]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  {1, token, owner}  cancelled: a done marker with a new token
--                             (issued as claim.lua issues one) now turns
--                             copies away; owner is the holder whose claim
--                             was retired ("" when nobody held the key)
--          {3, done_token}   already done (or cancelled before)
--
-- A held claim is retired: its claim key is deleted, so the holder's
-- verify, extend, record, complete, release and hand_back all find another
-- token (or none) and are refused (ClaimLost), and the done marker holds a
-- token above the holder's, so a store that keeps the highest token per key
-- refuses the holder's late effect. The holder hears of it by asking
-- (cancelled.lua: the worker's watch, forum.coordinator.keeping). Its history
-- gets the claim's "claimed" and a "cancelled" line with the new token and
-- the holder's owner and attempt.
--
-- An in-flight record left for re-offer stays until a reaper meets the done
-- marker and drops it (grab.lua), as for a completed key. A record of a
-- holder (live, or whose lease ran out) with nothing to re-offer is
-- dropped; one whose lease ran out has "claimed" and "expired" pushed to
-- the history first (as claim.lua does).
local lost = epoch_lost()
if lost then
  return lost
end
local done = redis.call('GET', KEYS[2])
if done then
  return {3, done}
end
local holder = redis.call('GET', KEYS[1])
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
local us = now_us()
local now = math.floor(us / 1000)
local token = string.format('%d', math.max(last + 1, us))
local before = redis.call('HMGET', KEYS[4], 'owner', 'attempt', 'since', 'token', 'handed', 'payload')
local owner = ''
if holder then
  redis.call('DEL', KEYS[1])
  owner = before[1] or ''
  push_history(KEYS[6], ARGV[3], {
    event(tonumber(before[3] or now), 'claimed', holder, before[2], before[1]),
    event(now, 'cancelled', token, before[2], before[1]),
  })
elseif before[4] and not before[5] then
  ended(KEYS[6], ARGV[3], now, 'expired', before[4], before)
end
if before[4] and not before[6] then
  redis.call('DEL', KEYS[4])
end
redis.call('SET', KEYS[3], token)
redis.call('SET', KEYS[2], token, 'PX', ARGV[2])
redis.call('HSET', KEYS[5], 'cancelled', token)
if redis.call('PTTL', KEYS[5]) == -1 then
  redis.call('PEXPIRE', KEYS[5], ARGV[2])
end
ix_move(KEYS[5], ARGV[1], 'cancelled', now)
if not holder then
  push_history(KEYS[6], ARGV[3], {event(now, 'cancelled', token, '0', '')})
end
return {1, token, owner}
