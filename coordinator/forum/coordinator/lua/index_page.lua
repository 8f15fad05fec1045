-- index_page.lua: the next entries of one of the job index's sorted sets
-- (forum.coordinator.jobindex: <tag>:ix:<state> or <tag>:ix:<state>:<task>),
-- in (score, member) order, after a cursor, within a score range.
--
-- KEYS[1]  <tag>:epoch        the shard's state marker (the set's name is
--                             built from its tag: prelude.lua)
-- ARGV[1]  the set: "<state>" or "<state>:<task>"
-- ARGV[2]  "1": newest first (descending), else oldest first
-- ARGV[3]  the lowest score wanted (ms, an integer)
-- ARGV[4]  the highest score wanted
-- ARGV[5]  the cursor's score, "" for none: start after (score, member)
--          ARGV[5], ARGV[6] in this order
-- ARGV[6]  the cursor's member
-- ARGV[7]  at most this many entries
-- ARGV[8]  "1": give each entry's job record's "args" too
-- ARGV[9]  the epoch the Lens saw (checked first: epoch_lost() in prelude.lua)
--
-- Returns  {total, more, member, score, args, task, ...}: total how many entries
--          the range holds (ZCOUNT, the whole range's), more 1 when
--          the set may hold more past these; args "" unless asked for.
--
-- The start is found by rank, not by an offset: ZCOUNT gives where the
-- cursor's score begins, and a binary search by member over the entries
-- of that score (Redis orders them bytewise) where the cursor's member
-- falls, O(log n) each, however deep the page. An entry whose job record
-- is gone (expired), or is indexed under another state now, is not given
-- and leaves this state's sets here (ix_drop).
local lost = epoch_lost()
if lost then
  return lost
end
local tag = ix_tag()
local set = ARGV[1]
local key = tag .. ':ix:' .. set
local newest = ARGV[2] == '1'
local lo, hi = ARGV[3], ARGV[4]
local count = tonumber(ARGV[7])
local total = redis.call('ZCOUNT', key, lo, hi)
local pos
if newest then
  pos = redis.call('ZCOUNT', key, '(' .. hi, '+inf')
else
  pos = redis.call('ZCOUNT', key, '-inf', '(' .. lo)
end
if ARGV[5] ~= '' then
  local cs, cm = ARGV[5], ARGV[6]
  local a, b, range
  if newest then
    a = redis.call('ZCOUNT', key, '(' .. cs, '+inf')
    range = 'ZREVRANGE'
  else
    a = redis.call('ZCOUNT', key, '-inf', '(' .. cs)
    range = 'ZRANGE'
  end
  b = a + redis.call('ZCOUNT', key, cs, cs)
  while a < b do
    local mid = math.floor((a + b) / 2)
    local m = redis.call(range, key, mid, mid)[1]
    if (newest and m < cm) or (not newest and m > cm) then
      b = mid
    else
      a = mid + 1
    end
  end
  pos = math.max(pos, a)
end
local got
if newest then
  got = redis.call('ZREVRANGE', key, pos, pos + count - 1, 'WITHSCORES')
else
  got = redis.call('ZRANGE', key, pos, pos + count - 1, 'WITHSCORES')
end
local state, task = string.match(set, '^([^:]+):?(.*)$')
local reply = {total, 0}
local within = 0
local gone = {}
local low, high = tonumber(lo), tonumber(hi)
for i = 1, #got, 2 do
  local score = tonumber(got[i + 1])
  if score < low or score > high then
    break
  end
  within = within + 1
  local record = tag .. ':task:' .. got[i]
  local held = redis.call('HMGET', record, 'task', 'args', 'ix')
  if held[1] and held[3] == state then
    reply[#reply + 1] = got[i]
    reply[#reply + 1] = got[i + 1]
    reply[#reply + 1] = (ARGV[8] == '1' and held[2]) or ''
    reply[#reply + 1] = held[1]
  elseif held[1] then
    ix_drop(tag, got[i], state, held[1])  -- left behind by an older record of the key
  else
    gone[#gone + 1] = got[i]
  end
end
if within == count then
  reply[2] = 1
end
-- Entries whose records are gone: out of every set of their state.
for _, member in ipairs(gone) do
  if task ~= '' then
    ix_drop(tag, member, state, task)
  else
    for _, name in ipairs(redis.call('SMEMBERS', tag .. ':ix:tasks')) do
      ix_drop(tag, member, state, name)
    end
    redis.call('ZREM', key, member)
  end
end
return reply
