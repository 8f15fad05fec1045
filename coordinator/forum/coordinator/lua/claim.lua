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
-- KEYS[7]  <tag>:epoch        the shard's state marker
-- (<tag> is the key's shard's hash tag {<ns>:<shard>}: every KEY is in one slot)
-- ARGV[1]  the claim key itself (the member of KEYS[5])
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  owner name (kept in the record, reported to a conflicting claimer)
-- ARGV[4]  "1" if ARGV[5] is to be re-offered should this claim expire, else "0"
-- ARGV[5]  the bytes to write back into the space if the claim expires
-- ARGV[6]  the delivery's attempt number (kept in the record)
-- ARGV[7]  the history's TTL in milliseconds; "0": no history
-- ARGV[8]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  {1, token}        claimed; token is strictly greater than any issued
--                             before in the shard, so than any for this key
--          {2, done_token}   already done: the key was completed with done_token
--          {3, owner, pttl}  already claimed by owner ("" when unknown), whose
--                             lease has pttl milliseconds left (PTTL of KEYS[1])
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
  return {2, done}
end
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
local us = now_us()
local token = string.format('%d', math.max(last + 1, us))
if not redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2]) then
  return {3, redis.call('HGET', KEYS[4], 'owner') or '', redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[3], token)
local now = math.floor(us / 1000)
local before = redis.call('HMGET', KEYS[4], 'owner', 'attempt', 'since', 'token', 'handed')
if before[4] and not before[5] then
  ended(KEYS[6], ARGV[7], now, 'expired', before[4], before)
end
local replaced = redis.call('DEL', KEYS[4]) == 1
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[4], 'token', token, 'owner', ARGV[3], 'attempt', ARGV[6],
    'since', now, 'payload', ARGV[5])
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), ARGV[1])
else
  redis.call('HSET', KEYS[4], 'token', token, 'owner', ARGV[3], 'attempt', ARGV[6], 'since', now)
  if replaced then
    redis.call('ZREM', KEYS[5], ARGV[1])
  end
end
return {1, token}
