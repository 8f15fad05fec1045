-- admitted.lua: extend or end one job's admission (forum.coordinator.limits):
-- its slot in each running bound of its limits.
--
-- KEYS[1..n]  <tag>:limit:<bound> of each running bound of the job's limits
--             (zsets: member a job's claim key, score its slot's expiry,
--             Redis TIME ms)
-- KEYS[n+1]   <tag>:epoch      the shard's state marker
-- ARGV[1]  the job's claim key (its member in each zset)
-- ARGV[2]  the new lease in milliseconds, counted from now; "0" to end it
-- ARGV[3]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 done; 0 extending found the key's slot gone from a bound (it
--          expired, or the limit's state was lost): it is not renewed there,
--          and the job no longer counts as admitted.
local lost = epoch_lost()
if lost then
  return lost
end
local lease = tonumber(ARGV[2])
local now = now_ms()
if lease == 0 then
  for i = 1, #KEYS - 1 do
    redis.call('ZREM', KEYS[i], ARGV[1])
  end
  return 1
end
local held = 1
for i = 1, #KEYS - 1 do
  local expiry = redis.call('ZSCORE', KEYS[i], ARGV[1])
  if not expiry or tonumber(expiry) <= now then
    held = 0
  end
end
if held == 0 then
  return 0
end
for i = 1, #KEYS - 1 do
  redis.call('ZADD', KEYS[i], 'XX', now + lease, ARGV[1])
  redis.call('PEXPIRE', KEYS[i], lease + 1000)
end
return 1
