-- admit.lua: admit one job under every one of its limits, all or none
-- (forum.coordinator.limits): nothing changes unless every bound admits it.
--
-- KEYS[1..n]  <tag>:limit:<bound> of each bound: running:<limit> (a zset:
--             member a job's claim key, score when its slot expires, Redis
--             TIME ms) or rate:<limit> (a string: the limit's next turn,
--             Redis TIME us)
-- KEYS[n+1]   <tag>:epoch      the shard's state marker
-- ARGV[1]  the job's claim key (the member it holds in each running zset)
-- ARGV[2]  the lease in milliseconds, counted from now
-- ARGV[3]  the bounds in KEYS order, space-separated: "r<most running>" or
--          "t<microseconds between two admissions>"
-- ARGV[4]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  {0, 0} admitted: the key holds a slot of each running bound until
--          now + lease (a key already in is admitted again, its slot's
--          expiry moved), and each rate's next turn is one interval on from
--          the turn (or from now, if later). A rate admits from half an
--          interval before its turn, so a job that asks a little late still
--          takes its turn and the rate is kept; no two admissions are
--          closer than half an interval, and any window of t seconds holds
--          at most t x rate + 1;
--          else {wait ms, exact}: exact 1 when only rates refused (the wait
--          is to the last refusing rate's turn, less the half interval),
--          else 0 (the wait is at least to the earliest expiry of a full
--          bound's slots; a release may free one sooner).
local lost = epoch_lost()
if lost then
  return lost
end
local member = ARGV[1]
local lease = tonumber(ARGV[2])
local us = now_us()
local now = math.floor(us / 1000)
local bounds = {}
for bound in string.gmatch(ARGV[3], '%S+') do
  bounds[#bounds + 1] = bound
end
local rate_wait, full_wait = 0, 0
local turns = {}
for i = 1, #KEYS - 1 do
  local kind, value = string.sub(bounds[i], 1, 1), tonumber(string.sub(bounds[i], 2))
  if kind == 'r' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    if not redis.call('ZSCORE', KEYS[i], member) and redis.call('ZCARD', KEYS[i]) >= value then
      local first = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
      full_wait = math.max(full_wait, tonumber(first[2]) - now, 1)
    end
  else
    local turn = tonumber(redis.call('GET', KEYS[i]) or '0')
    local early = turn - math.floor(value / 2) - us
    if early > 0 then
      rate_wait = math.max(rate_wait, math.ceil(early / 1000))
    end
    turns[i] = math.max(turn, us) + value
  end
end
if full_wait > 0 then
  return {math.max(full_wait, rate_wait), 0}
end
if rate_wait > 0 then
  return {rate_wait, 1}
end
for i = 1, #KEYS - 1 do
  if turns[i] then
    -- Kept a second past the turn: after it, a missing key is a turn passed.
    local ttl = math.ceil((turns[i] - us) / 1000) + 1000
    redis.call('SET', KEYS[i], string.format('%d', turns[i]), 'PX', ttl)
  else
    redis.call('ZADD', KEYS[i], now + lease, member)
    outlive(KEYS[i], lease + 1000)
  end
end
return {0, 0}
