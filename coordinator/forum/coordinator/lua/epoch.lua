-- epoch.lua: the Lens's state marker; create it if Redis has none.
--
-- KEYS[1]  <tag>:epoch  the shard's marker: string "<random id> <created, Redis
--                        TIME seconds> <shards>"
-- ARGV[1]  a random id for the marker, used only if there is none yet
-- ARGV[2]  how many shards the calling Lens splits the namespace into; kept
--          in the marker so that a Lens with another count can refuse
--          (coordinator/lens.py compares it: this script only reports it)
--
-- Returns  {1, marker}  no marker was there (a new Redis, or one that lost its
--                       state): this call created it
--          {0, marker}  the marker that was already there
--
-- Written once with SET NX and never expires: every later Lens adopts it. A
-- marker that disappears means Redis forgot the shard's keys (epoch_lost() in
-- the prelude tells every other script so).
local found = redis.call('GET', KEYS[1])
if found then
  return {0, found}
end
local marker = ARGV[1] .. ' ' .. redis.call('TIME')[1] .. ' ' .. ARGV[2]
redis.call('SET', KEYS[1], marker, 'NX')
return {1, marker}
