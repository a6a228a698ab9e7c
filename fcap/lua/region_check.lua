-- region_check.lua: check.lua for one region: read every field as the merge of its
-- regions' slots, and reserve (reserve-at-bid) in the region's own slots.
-- KEYS[1]: the counter hash; KEYS[2]: the change log of the server.
-- ARGV[1]: now_ms; ARGV[2]: the checking region; ARGV[3]: every region, space-separated;
-- ARGV[4]: reserve requests (as check.lua's ARGV[2]); ARGV[5..]: the fields to read.
-- Returns: as check.lua: each field's merged value (nil when no slot exists): the sum
--   of its slots, or for a recency field ('!') the latest; then one grant flag per
--   reserve request.
-- A reservation is never released in regional mode (a slot must only grow): a lost
-- bid keeps its slot until the bucket ends, the safe side.

local key, log = KEYS[1], KEYS[2]
local now, region = tonumber(ARGV[1]), ARGV[2]
local regions = {}
for name in string.gmatch(ARGV[3], '%S+') do
  regions[#regions + 1] = name
end
local fields, slots = {}, {}
for k = 5, #ARGV do
  fields[#fields + 1] = ARGV[k]
  for _, name in ipairs(regions) do
    slots[#slots + 1] = ARGV[k] .. '@' .. name
  end
end
local values = {}
if #slots > 0 then
  local raw = redis.call('HMGET', key, unpack(slots))
  for f = 1, #fields do
    local merged, recency = false, string.sub(fields[f], -1) == '!'
    for r = 1, #regions do
      local v = raw[(f - 1) * #regions + r]
      if v then
        v = tonumber(v)
        if not merged then
          merged = v
        elseif recency then
          merged = math.max(merged, v)
        else
          merged = merged + v
        end
      end
    end
    values[f] = merged
  end
end
if ARGV[4] == '' then
  return values
end

local function under(kind, limit, first, count)
  if kind == 't' then
    return (values[first] or 0) <= now
  end
  local sum = 0
  for k = first, first + count - 1 do
    sum = sum + (values[k] or 0)
  end
  return sum < limit
end

local changes = {}
-- Count one impression now in the region's slot of the rule's current field.
local function take(kind, size, first, count)
  local field = fields[kind == 't' and first or first + count - 1]
  local own = field .. '@' .. region
  local value, expiry
  if kind == 't' then
    value, expiry = now + size, now + size
    redis.call('HSET', key, own, int(value))
  else
    value = redis.call('HINCRBY', key, own, 1)
    expiry = tonumber(string.sub(field, 7), 36) * 60000
  end
  for k = 1, #fields do
    if fields[k] == field then
      values[k] = kind == 't' and value or (values[k] or 0) + 1
    end
  end
  changes[#changes + 1] = own
  changes[#changes + 1] = int(value)
  return expiry
end

local granted, last = grant_all(ARGV[4], under, take, prune_slots, key, now)
if last > 0 then
  keep_until(key, now, last)
end
log_change(log, key, now, changes)
for _, flag in ipairs(granted) do
  values[#values + 1] = flag
end
return values
