-- due.lua: the claim keys whose in-flight records are due for re-offer.
--
-- KEYS[1]  <ns>:inflight
-- ARGV[1]  at most this many keys
--
-- Returns  the due claim keys, earliest first. Read-only: grab.lua decides,
--          per key and atomically, whether a record is really abandoned.
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
