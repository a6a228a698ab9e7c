-- Helpers prepended to every fcap script by fcap/scripts.py; not a script itself.
-- Field names: a 6-character rule token, then either '!' (recency: the instant the gap
-- ends) / '~' (recency: the value before the last reservation), or the base-36 expiry
-- minute of a bucket. So any write can prune any stale field without knowing its rule.

-- Past expiry, fields and TTLs live this much longer: covers skew between bidder clocks.
local SLACK_MS = 120000
local DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'

local function b36(n)
  local s = ''
  repeat
    local d = n % 36
    s = string.sub(DIGITS, d + 1, d + 1) .. s
    n = (n - d) / 36
  until n == 0
  return s
end

local function int(n)
  return string.format('%d', n)
end

-- Rules come as 5 ARGV values: kind ('b' | 't'), token, size_ms, reach_ms, limit.
local function read_rule(i)
  local rule = {
    kind = ARGV[i], token = ARGV[i + 1], size = tonumber(ARGV[i + 2]),
    reach = tonumber(ARGV[i + 3]), limit = tonumber(ARGV[i + 4]),
  }
  return rule, i + 5
end

-- The first instant (caller ms) no check reads bucket j.
local function bucket_expiry(rule, j)
  return (j + 1) * rule.size + rule.reach
end

local function bucket_field(rule, j)
  return rule.token .. b36(math.ceil(bucket_expiry(rule, j) / 60000))
end

-- The first instant an impression at t stops counting for the rule.
local function impression_expiry(rule, t)
  if rule.kind == 't' then
    return t + rule.size
  end
  return bucket_expiry(rule, math.floor(t / rule.size))
end

-- The instant (caller ms) a counter field stops mattering; nil when the name is not
-- a counter's.
local function field_expiry(field, value)
  local suffix = string.sub(field, 7)
  if suffix == '!' or suffix == '~' then
    return tonumber(value)
  end
  local minute = tonumber(suffix, 36)
  return minute and minute * 60000
end

-- Drop every field that expired more than SLACK_MS ago by `expiry_of(name, value)`.
local function prune_by(key, now, expiry_of)
  local all = redis.call('HGETALL', key)
  local stale = {}
  for i = 1, #all, 2 do
    local expiry = expiry_of(all[i], all[i + 1])
    if expiry == nil or expiry + SLACK_MS < now then
      stale[#stale + 1] = all[i]
    end
  end
  if #stale > 0 then
    redis.call('HDEL', key, unpack(stale))
  end
end

-- Drop every counter field that expired more than SLACK_MS ago.
local function prune(key, now)
  prune_by(key, now, field_expiry)
end

-- Make the key outlive a field expiring at `expiry` (caller ms); TTLs only grow.
local function keep_until(key, now, expiry)
  local need = expiry - now + SLACK_MS
  if redis.call('PTTL', key) < need then
    redis.call('PEXPIRE', key, int(need))
  end
end

-- Reserve-at-bid: decide each candidate of `spec_text` (per candidate: its rule count m,
-- then m rules of five tokens: kind, limit, size, first field, field count). A candidate
-- whose rules are all `under` their limits takes one impression in each (`take`, which
-- returns the field's expiry), after one `prune_key` of the key. Returns the 1/0 flags
-- and the latest expiry taken (0: none), for the caller's `keep_until`.
local function grant_all(spec_text, under, take, prune_key, key, now)
  local spec = {}
  for t in string.gmatch(spec_text, '%S+') do
    spec[#spec + 1] = t
  end
  local granted, pruned, last = {}, false, 0
  local i = 1
  while i <= #spec do
    local m = tonumber(spec[i])
    local rules, ok = {}, true
    for r = 1, m do
      local at = i + 1 + (r - 1) * 5
      rules[r] = {spec[at], tonumber(spec[at + 2]), tonumber(spec[at + 3]), tonumber(spec[at + 4])}
      ok = ok and under(spec[at], tonumber(spec[at + 1]), rules[r][3], rules[r][4])
    end
    i = i + 1 + m * 5
    if ok then
      if not pruned then
        prune_key(key, now)
        pruned = true
      end
      for _, rule in ipairs(rules) do
        last = math.max(last, take(rule[1], rule[2], rule[3], rule[4]))
      end
    end
    granted[#granted + 1] = ok and 1 or 0
  end
  return granted, last
end

-- The rules (read from ARGV[first], after their count) an impression at `t` still
-- counts in, and the latest of their expiries (0: none).
local function live_rules(first, t, now)
  local live, last = {}, 0
  local i = first + 1
  for _ = 1, tonumber(ARGV[first]) do
    local rule
    rule, i = read_rule(i)
    local expiry = impression_expiry(rule, t)
    if expiry + SLACK_MS > now then
      live[#live + 1] = rule
      last = math.max(last, expiry)
    end
  end
  return live, last
end

-- Set the dedup mark of one impression, to live until its last rule expires. nil: its
-- first count, go on; else the script's answer (0 counted before, 2 too late for every
-- rule).
local function first_count(mark, live, last, now)
  if #live == 0 then
    return redis.call('EXISTS', mark) == 1 and 0 or 2
  end
  if not redis.call('SET', mark, '1', 'NX', 'PX', int(last - now + SLACK_MS)) then
    return 0
  end
  return nil
end
