-- index_counts.lua: the job index's counts of one shard (forum.coordinator.jobindex).
--
-- KEYS[1]  <tag>:epoch        the shard's state marker (the index's keys,
--                             <tag>:ix:..., are built from its tag: prelude.lua)
-- ARGV[1]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  {counts, due}: counts the hash <tag>:ix:counts as field, value,
--          ... (field "<state>:<task>", value how many jobs of the task are
--          indexed in the state); due the delayed jobs whose due time has
--          passed (so queued), as task, count, ... for each task with any.
--          Read-only: O(tasks) reads, never a scan.
local lost = epoch_lost()
if lost then
  return lost
end
local tag = ix_tag()
local counts = redis.call('HGETALL', tag .. ':ix:counts')
local now = now_ms()
local due = {}
for i = 1, #counts, 2 do
  if string.sub(counts[i], 1, 8) == 'delayed:' then
    local passed = redis.call('ZCOUNT', tag .. ':ix:' .. counts[i], 0, now)
    if passed > 0 then
      due[#due + 1] = string.sub(counts[i], 9)
      due[#due + 1] = passed
    end
  end
end
return {counts, due}
