-- record_forget.lua: drop a key's job record, unless a claim on the key is live.
--
-- KEYS[1]  <tag>:claim:<key>  the live claim's token, if any
-- KEYS[2]  <tag>:task:<key>   the job record (and its job's index entry:
--                             ix_move in prelude.lua)
-- KEYS[3]  <tag>:epoch        the shard's state marker
-- ARGV[1]  the claim key (unused; every keyed script takes it first)
-- ARGV[2]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  1 dropped; 0 there was none; -1 refused: a claim is live (its
--          holder writes the record: an operator's forget never races it).
local lost = epoch_lost()
if lost then
  return lost
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return -1
end
ix_move(KEYS[2], ARGV[1], false, 0)
return redis.call('DEL', KEYS[2])
