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
