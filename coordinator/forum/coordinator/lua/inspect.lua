-- inspect.lua: everything the Lens holds about one claim key, read at once.
--
-- KEYS[1]  <tag>:claim:<key>  the live claim's token, if any
-- KEYS[2]  <tag>:done:<key>   the done marker
-- KEYS[3]  <tag>:job:<key>    the in-flight record: owner, attempt, since
-- KEYS[4]  <tag>:task:<key>   the job record (record.lua, record_new.lua)
-- KEYS[5]  <tag>:epoch        the shard's state marker
-- ARGV[1]  the claim key (unused; every keyed script takes it first)
-- ARGV[2]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  {claim token or false, claim PTTL (ms), the in-flight record as
--           field, value, ...; the done token or false; the job record as
--           field, value, ...}. Read-only; one script, so the parts agree.
local lost = epoch_lost()
if lost then
  return lost
end
return {
  redis.call('GET', KEYS[1]),
  redis.call('PTTL', KEYS[1]),
  redis.call('HGETALL', KEYS[3]),
  redis.call('GET', KEYS[2]),
  redis.call('HGETALL', KEYS[4]),
}
