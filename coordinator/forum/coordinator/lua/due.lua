-- due.lua: the claim keys whose in-flight records are due for re-offer.
--
-- KEYS[1]  <tag>:inflight
-- KEYS[2]  <tag>:epoch        the Lens's state marker
-- ARGV[1]  at most this many keys
-- ARGV[2]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  the due claim keys, earliest first. Read-only: grab.lua decides,
--          per key and atomically, whether a record is really abandoned.
local lost = epoch_lost()
if lost then
  return lost
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
