"""The Lua scripts of the Redis state store: each store operation is one script, so atomic.

Conventions shared by the scripts:

- ``now`` is the first argument; an empty string means "use the Redis server's clock"
  (``TIME``), which every worker and replica shares;
- floats travel as strings (a Lua number returned to Redis is cut to an integer);
- every write refreshes the key's TTL, so state nobody touches goes away by itself.

The breaker hash holds ``opened_at``, ``consecutive``, ``trial``, ``trial_at``, ``seq`` and
one ``c:<i>`` / ``f:<i>`` pair (calls, failures) per bucket of ``window_s / buckets``
seconds. The task hash holds the totals of :class:`~tiered_router.state.TaskSnapshot`, one
``rule:<name>`` count per task rule, one ``recent:<backend>`` JSON list per backend, and
one ``holder:<id>`` field per process keeping a copy of the task (``state.task_cache_s``).
A count that a record would leave unchanged is not written: a missing field reads as 0.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BREAKER_ALLOW",
    "BREAKER_RECORD",
    "BREAKER_SNAPSHOT",
    "LIMIT_ADMIT",
    "LIMIT_SPEND",
    "MONITOR_READ",
    "MONITOR_RECORD",
    "TASK_HOLD",
    "TASK_RECORD",
    "register",
]


_CLOCK = """
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function fmt(x) return string.format('%.6f', x) end
"""

_WINDOW = """
-- sum the live buckets; with prune, delete the ones that left the window
local function window(key, now, width, buckets, prune)
  local current = math.floor(now / width)
  local flat = redis.call('HGETALL', key)
  local calls, failures = 0, 0
  for i = 1, #flat, 2 do
    local field = flat[i]
    local kind = string.sub(field, 1, 2)
    if kind == 'c:' or kind == 'f:' then
      local index = tonumber(string.sub(field, 3))
      if index <= current - buckets then
        if prune then redis.call('HDEL', key, field) end
      elseif kind == 'c:' then
        calls = calls + tonumber(flat[i + 1])
      else
        failures = failures + tonumber(flat[i + 1])
      end
    end
  end
  return calls, failures
end
local function state_of(opened, now, cooldown)
  if not opened then return 'closed' end
  if now - opened >= cooldown then return 'half_open' end
  return 'open'
end
"""

BREAKER_ALLOW = (
    _CLOCK
    + _WINDOW
    + """
-- KEYS[1] breaker; ARGV: now, cooldown_s, trial_lease_s, ttl_ms
-- returns {state, allowed (0/1), token}
local key = KEYS[1]
local now = clock(ARGV[1])
local cooldown, lease, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local v = redis.call('HMGET', key, 'opened_at', 'trial', 'trial_at')
local opened = tonumber(v[1])
local state = state_of(opened, now, cooldown)
if state == 'closed' then return {state, 1, ''} end
if state == 'open' then return {state, 0, ''} end
if v[2] and now - tonumber(v[3]) < lease then return {state, 0, ''} end
local token = KEYS[1] .. ':' .. redis.call('HINCRBY', key, 'seq', 1) .. ':' .. fmt(now)
redis.call('HSET', key, 'trial', token, 'trial_at', fmt(now))
redis.call('PEXPIRE', key, ttl)
return {state, 1, token}
"""
)

BREAKER_RECORD = (
    _CLOCK
    + _WINDOW
    + """
-- KEYS[1] breaker; ARGV: now, outcome, token, cooldown_s, consecutive (0: none),
-- min_calls, failure_ratio, window_s, buckets, ttl_ms, count (successes come in batches)
-- returns the state after the record
local key = KEYS[1]
local now = clock(ARGV[1])
local outcome, token = ARGV[2], ARGV[3]
local cooldown, run_limit = tonumber(ARGV[4]), tonumber(ARGV[5])
local min_calls, ratio = tonumber(ARGV[6]), tonumber(ARGV[7])
local width = tonumber(ARGV[8]) / tonumber(ARGV[9])
local buckets, ttl = tonumber(ARGV[9]), tonumber(ARGV[10])
local count = tonumber(ARGV[11])
local v = redis.call('HMGET', key, 'opened_at', 'trial')
local opened = tonumber(v[1])
if token ~= '' then
  if token == v[2] then
    if outcome == 'success' then
      redis.call('DEL', key)
      return 'closed'
    elseif outcome == 'failure' then
      redis.call('HSET', key, 'opened_at', fmt(now))
      opened = now
    end
    redis.call('HDEL', key, 'trial', 'trial_at')
    redis.call('PEXPIRE', key, ttl)
  end
  return state_of(opened, now, cooldown)
end
if opened or outcome == 'neutral' then return state_of(opened, now, cooldown) end
local bucket = math.floor(now / width)
if outcome == 'success' then
  redis.call('HINCRBY', key, 'c:' .. bucket, count)
  redis.call('HSET', key, 'consecutive', 0)
  window(key, now, width, buckets, true)
  redis.call('PEXPIRE', key, ttl)
  return 'closed'
end
redis.call('HINCRBY', key, 'c:' .. bucket, 1)
local run = redis.call('HINCRBY', key, 'consecutive', 1)
redis.call('HINCRBY', key, 'f:' .. bucket, 1)
local calls, failures = window(key, now, width, buckets, true)
redis.call('PEXPIRE', key, ttl)
if (run_limit > 0 and run >= run_limit) or (calls >= min_calls and failures / calls > ratio) then
  redis.call('HSET', key, 'opened_at', fmt(now))
  redis.call('HDEL', key, 'trial', 'trial_at')
  return state_of(now, now, cooldown)
end
return 'closed'
"""
)

BREAKER_SNAPSHOT = (
    _CLOCK
    + _WINDOW
    + """
-- KEYS[1] breaker; ARGV: now, cooldown_s, window_s, buckets
-- returns {state, consecutive, calls, failures, opened_at or '', trial (0/1)}
local key = KEYS[1]
local now = clock(ARGV[1])
local cooldown = tonumber(ARGV[2])
local buckets = tonumber(ARGV[4])
local width = tonumber(ARGV[3]) / buckets
local v = redis.call('HMGET', key, 'opened_at', 'consecutive', 'trial')
local opened = tonumber(v[1])
local calls, failures = window(key, now, width, buckets, false)
local trial = 0
if v[3] then trial = 1 end
return {state_of(opened, now, cooldown), tonumber(v[2] or '0'), calls, failures, v[1] or '', trial}
"""
)

TASK_RECORD = """
-- KEYS[1] task; ARGV[1] a JSON list of strings (one argument packs and sends faster than
-- eighteen): ttl_ms, cost, latency_s, escalated, fast_decided, fast_served,
-- gate_failures, stalled, clean, rule, input_tokens, output_tokens,
-- lock_after_gate_failures (0: never), lock_on_stall, unlock_after_clean_turns,
-- latency_window, latencies (JSON [[backend, latency_s, output_tokens], ...]),
-- answer ('1': HGETALL of the task after the update; '0': nothing, for a sent record),
-- notes (a channel prefix), writer, holds ('1': the writer keeps a copy of the task),
-- step ('0': spend alone, a shadow call's: cost and tokens are added, nothing else).
-- Every other process holding a copy (a 'holder:<id>' field, see TASK_HOLD) is told on
-- its channel <notes><id> and forgotten; see tiered_router.state._task_cache
local ARGV = cjson.decode(ARGV[1])
local key = KEYS[1]
local ttl = tonumber(ARGV[1])
local gate_failures = tonumber(ARGV[7])
local stalled, clean = ARGV[8] == '1', ARGV[9] == '1'
local rule = ARGV[10]
local lock_after, lock_on_stall = tonumber(ARGV[13]), ARGV[14] == '1'
local unlock_after, keep = tonumber(ARGV[15]), tonumber(ARGV[16])
-- a count that does not change is not written (a missing field reads as 0)
local function add(field, by)
  if by ~= '0' then redis.call('HINCRBY', key, field, by) end
end
local function add_float(field, by)
  if tonumber(by) ~= 0 then redis.call('HINCRBYFLOAT', key, field, by) end
end
if ARGV[22] == '0' then
  add_float('cost', ARGV[2])
  add('input_tokens', ARGV[11])
  add('output_tokens', ARGV[12])
else
redis.call('HINCRBY', key, 'steps', 1)
add_float('cost', ARGV[2])
add_float('latency_s', ARGV[3])
add('escalations', ARGV[4])
add('fast_decided', ARGV[5])
add('fast_served', ARGV[6])
add('gate_failures', ARGV[7])
add('stalls', ARGV[8])
add('input_tokens', ARGV[11])
add('output_tokens', ARGV[12])
if rule ~= '' then redis.call('HINCRBY', key, 'rule:' .. rule, 1) end
for _, item in ipairs(cjson.decode(ARGV[17])) do
  local field = 'recent:' .. item[1]
  local recent = {}
  local stored = redis.call('HGET', key, field)
  if stored then recent = cjson.decode(stored) end
  table.insert(recent, {item[2], item[3]})
  while #recent > keep do table.remove(recent, 1) end
  redis.call('HSET', key, field, cjson.encode(recent))
end
local v = redis.call('HMGET', key, 'locked_by', 'window_failures', 'clean_streak')
local locked_by = v[1]
local window = tonumber(v[2] or '0') + gate_failures
local streak = tonumber(v[3] or '0')
if stalled and lock_on_stall then
  locked_by, streak = 'a stall', 0
end
if gate_failures > 0 and lock_after > 0 and window >= lock_after then
  locked_by, streak = window .. ' gate failures', 0
end
if clean then
  streak = streak + 1
  if streak >= unlock_after then
    locked_by, window = false, 0
  end
else
  streak = 0
end
if locked_by then
  redis.call('HSET', key, 'locked_by', locked_by)
else
  redis.call('HDEL', key, 'locked_by')
end
redis.call('HSET', key, 'window_failures', window, 'clean_streak', streak)
end
local mine = 'holder:' .. ARGV[20]
for _, field in ipairs(redis.call('HKEYS', key)) do
  if string.sub(field, 1, 7) == 'holder:' and field ~= mine then
    redis.call('HDEL', key, field)
    redis.call('PUBLISH', ARGV[19] .. string.sub(field, 8), key)
  end
end
if ARGV[21] == '1' then redis.call('HSET', key, mine, 1) end
redis.call('PEXPIRE', key, ttl)
if ARGV[18] == '0' then return 1 end
return redis.call('HGETALL', key)
"""

LIMIT_ADMIT = """
-- KEYS[1] rate key stem, KEYS[2] spend key stem; ARGV: per_minute (0: none),
-- spend limit ('' : none)
-- returns {allowed (0/1), reason ('' | 'rate' | 'spend'), retry_after_s}
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if ARGV[2] ~= '' then
  local day = math.floor(now / 86400)
  local spent = tonumber(redis.call('GET', KEYS[2] .. ':' .. day) or '0')
  if spent >= tonumber(ARGV[2]) then
    return {0, 'spend', string.format('%.3f', (day + 1) * 86400 - now)}
  end
end
local limit = tonumber(ARGV[1])
if limit > 0 then
  local minute = math.floor(now / 60)
  local key = KEYS[1] .. ':' .. minute
  local n = redis.call('INCR', key)
  if n == 1 then redis.call('PEXPIRE', key, 120000) end
  if n > limit then
    return {0, 'rate', string.format('%.3f', (minute + 1) * 60 - now)}
  end
end
return {1, '', '0'}
"""

LIMIT_SPEND = """
-- KEYS[1] spend key stem; ARGV: usd
local t = redis.call('TIME')
local key = KEYS[1] .. ':' .. math.floor(tonumber(t[1]) / 86400)
redis.call('INCRBYFLOAT', key, ARGV[1])
redis.call('PEXPIRE', key, 172800000)
return 1
"""


TASK_HOLD = """
-- KEYS[1] task; ARGV: holder id, ttl_ms. Read the task and note that the caller keeps a
-- copy ('holder:<id>'), so that the next record by anyone else tells it (TASK_RECORD)
local key = KEYS[1]
local new = redis.call('EXISTS', key) == 0
redis.call('HSET', key, 'holder:' .. ARGV[1], 1)
if new then redis.call('PEXPIRE', key, tonumber(ARGV[2])) end
return redis.call('HGETALL', key)
"""

_JUDGE = """
-- the Wilson score lower bound of m of n at quantile z, and the state it puts the kind in
-- (the same expressions as tiered_router.state._monitor.wilson_lower and judge)
local function judge(n, m, min_compared, target, z, enforce)
  if n < min_compared or n <= 0 then return 'ok' end
  local p = m / n
  local z2 = z * z
  local centre = p + z2 / (2 * n)
  local inner = p * (1 - p) / n + z2 / (4 * n * n)
  if inner < 0 then inner = 0 end
  local bound = (centre - z * math.sqrt(inner)) / (1 + z2 / n)
  if bound >= target then return 'ok' end
  if enforce then return 'enforcing' end
  return 'below_target'
end
"""

MONITOR_RECORD = (
    _JUDGE
    + """
-- KEYS[1] the kind's hash (n, m, total, state), KEYS[2] its window (a list of '1' / '0');
-- ARGV: matched ('1' / '0'), window, min_compared, target, z, enforce ('1' / '0'), ttl_ms
-- returns {n, m, total, previous state, state}
local key, list = KEYS[1], KEYS[2]
local bit = ARGV[1]
local window, min_compared = tonumber(ARGV[2]), tonumber(ARGV[3])
local target, z, enforce = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
local ttl = tonumber(ARGV[7])
redis.call('RPUSH', list, bit)
local m = tonumber(redis.call('HGET', key, 'm') or '0')
if bit == '1' then m = m + 1 end
local n = redis.call('LLEN', list)
while n > window do
  if redis.call('LPOP', list) == '1' then m = m - 1 end
  n = n - 1
end
local total = redis.call('HINCRBY', key, 'total', 1)
local previous = redis.call('HGET', key, 'state') or 'ok'
local state = judge(n, m, min_compared, target, z, enforce)
redis.call('HSET', key, 'm', m, 'state', state)
redis.call('PEXPIRE', key, ttl)
redis.call('PEXPIRE', list, ttl)
return {n, m, total, previous, state}
"""
)

MONITOR_READ = """
-- KEYS[1] the kind's hash, KEYS[2] its window; returns {n, m, total} (one round trip)
return {redis.call('LLEN', KEYS[2]), tonumber(redis.call('HGET', KEYS[1], 'm') or '0'),
        tonumber(redis.call('HGET', KEYS[1], 'total') or '0')}
"""


def register(client: Any) -> dict[str, Any]:
    """Every operation on a redis-py client (sync or asyncio) by name: scripts, and the read."""
    return {
        "allow": client.register_script(BREAKER_ALLOW),
        "record": client.register_script(BREAKER_RECORD),
        "snapshot": client.register_script(BREAKER_SNAPSHOT),
        "task": client.register_script(TASK_RECORD),
        "task_hold": client.register_script(TASK_HOLD),
        # a plain read needs no script: one HGETALL, called like the scripts
        "task_read": lambda keys, args: client.hgetall(keys[0]),
        "limit_admit": client.register_script(LIMIT_ADMIT),
        "limit_spend": client.register_script(LIMIT_SPEND),
        "monitor_record": client.register_script(MONITOR_RECORD),
        "monitor_read": client.register_script(MONITOR_READ),
    }
