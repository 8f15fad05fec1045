-- index_counts.lua: the job index's counts of one shard (forum.coordinator.jobindex).
--
-- KEYS[1]  <tag>:epoch        the shard's state marker (the index's keys,
--                             <tag>:ix:..., are built from its tag: prelude.lua)
-- ARGV[1]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  {counts, due}: counts as field, value, ... (field
--          "<state>:<task>", value how many jobs of the task are indexed in
--          the state: the ZCARD of <tag>:ix:<state>:<task>, for each task of
--          <tag>:ix:tasks; none for an empty set); due the delayed jobs whose
--          due time has passed (so queued), as task, count, ... for each task
--          with any. Read-only: O(tasks x states) reads, never a scan.
local lost = epoch_lost()
if lost then
  return lost
end
local tag = ix_tag()
local STATES = {'queued', 'delayed', 'running', 'retrying', 'done', 'dead', 'cancelled'}
local now = now_ms()
local counts = {}
local due = {}
for _, task in ipairs(redis.call('SMEMBERS', tag .. ':ix:tasks')) do
  for _, state in ipairs(STATES) do
    local n = redis.call('ZCARD', tag .. ':ix:' .. state .. ':' .. task)
    if n > 0 then
      counts[#counts + 1] = state .. ':' .. task
      counts[#counts + 1] = n
      if state == 'delayed' then
        local passed = redis.call('ZCOUNT', tag .. ':ix:delayed:' .. task, 0, now)
        if passed > 0 then
          due[#due + 1] = task
          due[#due + 1] = passed
        end
      end
    end
  end
end
return {counts, due}
