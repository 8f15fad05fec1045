-- prelude.lua: prepended to every Lens script by coordinator/scripts.py.
--
-- KEYS, ARGV: none of its own.
-- Defines now_ms(): Redis server time in milliseconds. Lease expiry scores use
-- the server's clock so the workers' clocks never matter.
--
-- replicate_commands() lets a script write after TIME on Redis 5 and 6 (it
-- replicates the script's effects, not the script); on Redis 7 it is a no-op.
redis.replicate_commands()

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
