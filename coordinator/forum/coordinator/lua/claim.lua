-- claim.lua: grant a claim on a key, with a new fencing token.
--
-- KEYS[1]  <tag>:claim:<key>  the claim: string, the holder's token; PX = lease
-- KEYS[2]  <tag>:done:<key>   the done marker
-- KEYS[3]  <tag>:fence        the last fencing token issued in the shard (string)
-- KEYS[4]  <tag>:job:<key>    the in-flight record (hash): token, owner,
--                             attempt, since (Redis TIME ms), payload
-- KEYS[5]  <tag>:inflight     zset: claim key -> when its record is due (ms)
-- KEYS[6]  <tag>:history:<key>  the key's history (list; push_history in
--                             prelude.lua): written only when an earlier
--                             holder's lease ran out ("claimed", "expired")
-- KEYS[7]  <tag>:attempts:<key>  the job's attempts (hash): next, due, revived
--                             (coordinator.keys; written by release.lua when an
--                             attempt failed)
-- KEYS[8]  <tag>:task:<key>   the job record: a job of a task is indexed
--                             running (ix_move in prelude.lua)
-- KEYS[9]  <tag>:counts       what the shard caught (hash): double_takes is
--                             counted at every refusal below (2, 3, 5: a copy
--                             of a job done, running or buried elsewhere);
--                             reoffered when this claim takes over from a
--                             holder that let its lease run out, unless a
--                             reaper grabbed that record first (grab.lua
--                             counted it): each lost claim is counted once
-- KEYS[10] <tag>:epoch        the shard's state marker
-- (<tag> is the key's shard's hash tag {<ns>:<shard>}: every KEY is in one slot)
-- ARGV[1]  the claim key itself (the member of KEYS[5])
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  owner name (kept in the record, reported to a conflicting claimer)
-- ARGV[4]  "1" if ARGV[5] is to be re-offered should this claim expire, else "0"
-- ARGV[5]  the bytes to write back into the space if the claim expires
-- ARGV[6]  the attempt the delivery's copy says it is (its trailer's)
-- ARGV[7]  the history's TTL in milliseconds; "0": no history
-- ARGV[8]  the dead letter the copy was requeued from ("" for none: the
--          trailer's "revived", coordinator.envelope)
-- ARGV[9]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  {1, token, attempt, lapsed}  claimed; token is strictly greater
--                             than any issued before in the shard, so than any
--                             for this key; attempt is the attempt the Lens
--                             counts this claim as (kept in the record); lapsed
--                             is 1 when the key's last holder let its lease run
--                             out (its worker died), else 0
--          {2, done_token}   already done: the key was completed with done_token
--          {3, owner, pttl}  already claimed by owner ("" when unknown), whose
--                             lease has pttl milliseconds left (PTTL of KEYS[1])
--          {4, wait, next}   an attempt failed and the next, attempt next, is
--                             not due for wait milliseconds (Redis TIME)
--          {5, made}         the job was buried after attempt made: no more
--                             attempts (until it is requeued)
--
-- The attempt counted is the largest of the copy's own ARGV[6], the next
-- attempt the attempts record says, and, when the last holder's lease ran out
-- (its in-flight record is still there), that holder's attempt + 1. So every
-- copy of a job, on any node, is counted in one sequence while Redis remembers
-- (docs/coordination.md, "How many times can my task run?"). A copy requeued
-- from a dead letter (ARGV[8]) other than the one a buried record names
-- starts again: that record is no refusal, and is deleted when the claim is
-- granted. A copy never requeued ("") is refused by any buried record.
--
-- The token is max(last + 1, Redis TIME in microseconds): one more than the
-- last issued while Redis remembers it, and never below the clock when it
-- forgot (a FLUSHALL, a restart without persistence, a lagging replica
-- promoted). So tokens go backwards only if Redis's clock reads earlier than
-- the last token issued before the loss (docs/coordination.md). Tokens stay
-- below 2^53 (until the year 2255) so doubles, Lua's and JSON's, hold them
-- exactly; the string is written with %d, never tostring() (14 digits).
--
-- The fence is written only when the claim was granted (SET NX answered OK),
-- so a refused claim writes nothing. A record left by an earlier holder of
-- the key (one whose claim expired) is replaced: the record always belongs to
-- the key's latest claim. The key is a member of KEYS[5] only while it has a
-- record (every script that adds it keeps the record), so a key with no
-- record before needs no ZREM.
local lost = epoch_lost()
if lost then
  return lost
end
local done = redis.call('GET', KEYS[2])
if done then
  redis.call('HINCRBY', KEYS[9], 'double_takes', 1)
  return {2, done}
end
local us = now_us()
local attempt = tonumber(ARGV[6])
local tries = redis.call('HMGET', KEYS[7], 'next', 'due', 'revived')
local renewed = false
if tries[1] then
  if tries[2] == '-1' then
    if ARGV[8] == '' or ARGV[8] == tries[3] then
      redis.call('HINCRBY', KEYS[9], 'double_takes', 1)
      return {5, tonumber(tries[1]) - 1}
    end
    renewed = true
  else
    local wait = tonumber(tries[2] or '0') - math.floor(us / 1000)
    if wait > 0 then
      return {4, wait, tonumber(tries[1])}
    end
    attempt = math.max(attempt, tonumber(tries[1]))
  end
end
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
local token = string.format('%d', math.max(last + 1, us))
if not redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2]) then
  redis.call('HINCRBY', KEYS[9], 'double_takes', 1)
  return {3, redis.call('HGET', KEYS[4], 'owner') or '', redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[3], token)
local now = math.floor(us / 1000)
local before = redis.call('HMGET', KEYS[4], 'owner', 'attempt', 'since', 'token', 'handed', 'grab')
local lapsed = 0
if before[4] and not before[5] then
  if not before[6] then
    redis.call('HINCRBY', KEYS[9], 'reoffered', 1)
  end
  ended(KEYS[6], ARGV[7], now, 'expired', before[4], before)
  lapsed = 1
  attempt = math.max(attempt, tonumber(before[2] or '0') + 1)
end
if renewed then
  redis.call('DEL', KEYS[7])
end
local replaced = redis.call('DEL', KEYS[4]) == 1
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[4], 'token', token, 'owner', ARGV[3], 'attempt', attempt,
    'since', now, 'payload', ARGV[5])
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), ARGV[1])
else
  redis.call('HSET', KEYS[4], 'token', token, 'owner', ARGV[3], 'attempt', attempt, 'since', now)
  if replaced then
    redis.call('ZREM', KEYS[5], ARGV[1])
  end
end
ix_move(KEYS[8], ARGV[1], 'running', now)
return {1, token, attempt, lapsed}
