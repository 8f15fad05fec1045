-- requeued.lua: a dead job's letter was put back to work (forum.tasks.admin
-- retry): the job index has it queued again, unless it moved on meanwhile.
--
-- KEYS[1]  <tag>:task:<key>   the job record (its "ix": the index's state)
-- KEYS[2]  <tag>:epoch        the shard's state marker
-- ARGV[1]  the claim key
-- ARGV[2]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 moved from dead to queued; 0 it was not indexed dead (a worker
--          claimed it already, or it was never indexed): left as it is.
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('HGET', KEYS[1], 'ix') ~= 'dead' then
  return 0
end
ix_move(KEYS[1], ARGV[1], 'queued', now_ms())
return 1
