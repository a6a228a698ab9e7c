-- check.lua: read every counter a request's candidates need; reserve for those asking.
-- KEYS[1]: the counter hash of one user or one household (fcap.keys.counters).
-- ARGV[1]: now_ms, the caller's clock (epoch ms, UTC).
-- ARGV[2]: reserve requests (reserve-at-bid subjects), space-separated; per subject:
--   m, then m rules of 5 values: kind ('b' | 't'), limit, size_ms (bucket size or
--   minimum gap), first (1-based index of the rule's first field among the fields),
--   count.
-- ARGV[3..]: the fields to read, one per argument (fcap.rules.fields_at of every rule).
-- Returns: the value of each field in order (nil when absent), as it is after this
--   call's reservations; then one integer per reserve request: 1 when it was under
--   every cap and one impression was counted now, 0 when capped.
-- The caller decides "capped" from the values (fcap.rules.capped_until); only the
-- reservations must decide here, atomically, so concurrent bids never pass a limit.
-- Requests are taken in order: a reservation is seen by the requests after it.
-- (fcap.store sends a check with no reserve request as a plain HMGET instead: the
-- same answer without a script.)

local key = KEYS[1]
local now = tonumber(ARGV[1])
local fields = {}
for k = 3, #ARGV do
  fields[k - 2] = ARGV[k]
end
local values = {}
if #fields > 0 then
  values = redis.call('HMGET', key, unpack(fields))
end
if ARGV[2] == '' then
  return values
end

local function under(kind, limit, first, count)
  if kind == 't' then
    return tonumber(values[first] or '0') <= now
  end
  local sum = 0
  for k = first, first + count - 1 do
    sum = sum + tonumber(values[k] or '0')
  end
  return sum < limit
end

-- Rules of several subjects may share a field (an advertiser window): keep all copies.
local function set_value(field, value)
  for k = 1, #fields do
    if fields[k] == field then
      values[k] = value
    end
  end
end

-- Count one impression now in the rule's current bucket; returns when it expires.
local function take(kind, size, first, count)
  if kind == 't' then
    local token = string.sub(fields[first], 1, 6)
    local before = values[first]
    set_value(fields[first], int(now + size))
    redis.call('HSET', key, fields[first], values[first])
    if before then
      redis.call('HSET', key, token .. '~', before)
    else
      redis.call('HDEL', key, token .. '~')
    end
    return now + size
  end
  local current = first + count - 1
  set_value(fields[current], redis.call('HINCRBY', key, fields[current], 1))
  return tonumber(string.sub(fields[current], 7), 36) * 60000
end

local granted, last = grant_all(ARGV[2], under, take, prune, key, now)
if last > 0 then
  keep_until(key, now, last)
end
for _, flag in ipairs(granted) do
  values[#values + 1] = flag
end
return values
