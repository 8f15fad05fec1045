-- claim.lua: grant a claim on a key, with a new fencing token.
--
-- KEYS[1]  <ns>:claim:<key>  the claim: string, the holder's token; PX = lease
-- KEYS[2]  <ns>:done:<key>   the done marker
-- KEYS[3]  <ns>:fence        the global fencing counter
-- KEYS[4]  <ns>:job:<key>    the in-flight record (hash)
-- KEYS[5]  <ns>:inflight     zset: claim key -> when its record is due (ms)
-- ARGV[1]  the claim key itself (the member of KEYS[5])
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  owner name (kept in the record, reported to a conflicting claimer)
-- ARGV[4]  "1" if ARGV[5] is to be re-offered should this claim expire, else "0"
-- ARGV[5]  the bytes to write back into the space if the claim expires
--
-- Returns  {1, token}        claimed; token is strictly greater than any issued before
--          {2, done_token}   already done: the key was completed with done_token
--          {3, owner}        already claimed by owner ("" when unknown)
--
-- A record left by an earlier holder of the key (one whose claim expired) is
-- replaced: the record always belongs to the key's latest claim.
local done = redis.call('GET', KEYS[2])
if done then
  return {2, done}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {3, redis.call('HGET', KEYS[4], 'owner') or ''}
end
local token = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2])
redis.call('DEL', KEYS[4])
redis.call('HSET', KEYS[4], 'token', token, 'owner', ARGV[3])
if ARGV[4] == '1' then
  redis.call('HSET', KEYS[4], 'payload', ARGV[5])
  redis.call('ZADD', KEYS[5], now_ms() + tonumber(ARGV[2]), ARGV[1])
else
  redis.call('ZREM', KEYS[5], ARGV[1])
end
return {1, token}
