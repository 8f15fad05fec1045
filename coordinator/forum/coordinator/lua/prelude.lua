-- prelude.lua: prepended to every Lens script by coordinator/scripts.py.
--
-- KEYS, ARGV: none of its own; epoch_lost() reads the caller's last KEY and
-- last ARGV (the convention every stateful script follows); the history
-- helpers below are given their key and TTL by their caller.
--
-- now_ms(), now_us(): Redis server time in milliseconds / microseconds. Lease
-- expiry scores and fencing tokens use the server's clock, so the workers'
-- clocks never matter. Both are exact: Lua numbers are doubles, and every
-- integer below 2^53 (about 9.0e15; now_us() is about 1.8e15) is exact. Never
-- tostring() or '..' such a number: Lua prints it with 14 digits
-- (1.7961229613412e+15). Pass it to redis.call, or string.format('%d', n).
--
-- replicate_commands() lets a script write after TIME on Redis 5 and 6 (it
-- replicates the script's effects, not the script); on Redis 7 it is a no-op.
redis.replicate_commands()

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- epoch_lost(): nil while KEYS[#KEYS] (<tag>:epoch, the shard's state marker) holds
-- ARGV[#ARGV] (the epoch the calling Lens saw), else the error reply
-- "LENSSTATE gone" (the marker is missing: Redis forgot everything) or
-- "LENSSTATE changed <marker>" (another Lens re-created it after a loss).
-- A script calls it before anything else, so a lost state is never written to.
local function epoch_lost()
  local epoch = redis.call('GET', KEYS[#KEYS])
  if epoch == ARGV[#ARGV] then
    return nil
  end
  if not epoch then
    return redis.error_reply('LENSSTATE gone')
  end
  return redis.error_reply('LENSSTATE changed ' .. epoch)
end

-- event(now, name, token, attempt, owner): one history line, "<now: Redis
-- TIME ms> <name> <token> <attempt> <owner>" (owner last: it may hold spaces).
-- push_history(key, ttl_ms, lines): append lines to a claim key's history
-- (<tag>:history:<key>, a list, oldest first), keep the last HISTORY_LENGTH
-- (coordinator.keys), and let the list expire ttl_ms after its last push;
-- with ttl_ms "0" (LensConfig.history_ttl = 0) push nothing: no history kept.
--
-- Pushed by the script that ended a claim (complete, release, hand_back; the
-- next claim or a cancel for one whose lease ran out), with the claim's own
-- "claimed" line (its time from the in-flight record's "since") in the same
-- RPUSH: a claim itself writes no history, so the hot path pays one push per
-- job, and the live claim's "claimed" is read from its in-flight record
-- (coordinator.lens, history()). History so costs no round trip and never
-- disagrees with the state.
local HISTORY_LENGTH = 50

local function event(now, name, token, attempt, owner)
  return string.format('%d %s %s %s %s', now, name, token, attempt or '0', owner or '')
end

local function push_history(key, ttl, lines)
  if ttl == '0' then
    return
  end
  if redis.call('RPUSH', key, unpack(lines)) > HISTORY_LENGTH then
    redis.call('LTRIM', key, -HISTORY_LENGTH, -1)
  end
  redis.call('PEXPIRE', key, ttl)
end

-- ended(key, ttl, now, name, token, held): push the "claimed" and the ending
-- line of the claim whose in-flight record fields are held = {owner,
-- attempt, since} (HMGET), as push_history says.
local function ended(key, ttl, now, name, token, held)
  push_history(key, ttl, {
    event(tonumber(held[3] or now), 'claimed', token, held[2], held[1]),
    event(now, name, token, held[2], held[1]),
  })
end

-- outlive(key, ms): a limit's zset (admit.lua, admitted.lua) lives at least
-- ms more, never shortened (other members' leases may be longer): a limit
-- nobody asks for any more goes.
local function outlive(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- The job index (forum.coordinator.jobindex): per shard, a zset per state
-- (<tag>:ix:<state>) and per state and task (<tag>:ix:<state>:<task>), member
-- the claim key, score when it entered the state (Redis TIME ms; for delayed
-- and retrying, when it is due), and a set of the task names indexed
-- (<tag>:ix:tasks, added to when a job is first indexed): the counts are the
-- ZCARDs of the per-task sets (index_counts.lua), so a move keeps no count.
-- The job record (<tag>:task:<key>) names the task (field "task"; a key
-- whose record names none, a raw Worker's, is never indexed) and keeps the
-- state it is indexed under (field "ix"), so a move takes it out of the old
-- sets. The index keys are built here from the caller's epoch key
-- (KEYS[#KEYS]): they carry its hash tag, so its slot.
local function ix_tag()
  return string.sub(KEYS[#KEYS], 1, -7)
end

-- ix_drop(tag, key, state, task): take key out of state's sets.
local function ix_drop(tag, key, state, task)
  redis.call('ZREM', tag .. ':ix:' .. state, key)
  redis.call('ZREM', tag .. ':ix:' .. state .. ':' .. task, key)
end

-- ix_trim(tag, state, task): a final state's oldest entries of the task
-- whose records are gone (expired: their life, result_ttl, is over) leave
-- the index; at most two per call, so each write into a final state takes
-- out more than it adds while any are due, and costs O(1) otherwise.
local function ix_trim(tag, state, task)
  for _, old in ipairs(redis.call('ZRANGE', tag .. ':ix:' .. state .. ':' .. task, 0, 1)) do
    if redis.call('EXISTS', tag .. ':task:' .. old) == 1 then
      return
    end
    ix_drop(tag, old, state, task)
  end
end

-- The states whose score is when the job is due, not when it entered the
-- state: a move into one of them again moves the score; into any other
-- state again, nothing is written.
local IX_DUE = {delayed = true, retrying = true}

-- ix_move(record, key, state, score, held): index claim key `key`, whose job
-- record is `record`, under `state` with `score` (ms); state false: out of
-- the index. Nothing for a record that names no task (or none at all).
-- held: the record's {task, ix} when the caller read them already (HMGET),
-- else nil (read here).
local function ix_move(record, key, state, score, held)
  held = held or redis.call('HMGET', record, 'task', 'ix')
  local task, old = held[1], held[2]
  if not task or (old == state and not IX_DUE[state]) then
    return
  end
  local tag = ix_tag()
  if old and old ~= state then
    ix_drop(tag, key, old, task)
  end
  if not state then
    redis.call('HDEL', record, 'ix')
    return
  end
  local at = string.format('%d', score)
  redis.call('ZADD', tag .. ':ix:' .. state, at, key)
  redis.call('ZADD', tag .. ':ix:' .. state .. ':' .. task, at, key)
  if old ~= state then
    if not old then
      redis.call('SADD', tag .. ':ix:tasks', task)
    end
    redis.call('HSET', record, 'ix', state)
    if state == 'done' or state == 'dead' or state == 'cancelled' then
      ix_trim(tag, state, task)
    end
  end
end

-- ix_settled(record): what a job's record says its attempt ended as:
-- 'dead', or 'retrying' and when it is due (ms); else false.
local function ix_settled(record)
  local said = redis.call('HMGET', record, 'state', 'due')
  if said[1] == 'dead' then
    return 'dead', nil
  end
  if said[1] == 'retrying' then
    return 'retrying', tonumber(said[2] or '0') * 1000
  end
  return false, nil
end

-- ix_enqueued(record, key, now): index a producer's new record: done or
-- running when a worker got there first (its record came late), else
-- delayed until its due (the record's "due", Unix s) or queued from now.
local function ix_enqueued(record, key, now)
  local tag = ix_tag()
  if redis.call('EXISTS', tag .. ':done:' .. key) == 1 then
    ix_move(record, key, 'done', now)
  elseif redis.call('EXISTS', tag .. ':claim:' .. key) == 1 then
    ix_move(record, key, 'running', now)
  else
    local due = math.floor(tonumber(redis.call('HGET', record, 'due') or '0') * 1000)
    if due > now then
      ix_move(record, key, 'delayed', due)
    else
      ix_move(record, key, 'queued', now)
    end
  end
end

-- producer_late(record, key, fields, now): a producer's record (fields, the
-- unpacked field, value, ... array) came after a worker's first record of
-- the key: the producer's "args" and "enqueued" are set where the record has
-- none (HSETNX: what a worker wrote stays), and the job is indexed as
-- ix_enqueued says when it is not yet (the worker's record came before its
-- claim's move, or with no task then).
local function producer_late(record, key, fields, now)
  for i = 1, #fields, 2 do
    if fields[i] == 'args' or fields[i] == 'enqueued' then
      redis.call('HSETNX', record, fields[i], fields[i + 1])
    end
  end
  if not redis.call('HGET', record, 'ix') then
    ix_enqueued(record, key, now)
  end
end
