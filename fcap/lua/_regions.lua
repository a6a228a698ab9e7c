-- Helpers of the regional scripts, prepended after _lib.lua by fcap/scripts.py; not a
-- script itself. In regional mode a counter field is split into slots, one per region:
-- '<field>@<region>' (fcap/regions.py). A slot only grows, so copies merge by max.

-- Changes kept in a region's change log for the replicators (XADD MAXLEN ~).
local LOG_MAXLEN = 200000
-- The log's TTL, renewed by every write: an idle region's log goes away.
local LOG_TTL_MS = 86400000

local function field_of(slot)
  return string.match(slot, '^([^@]*)')
end

-- The instant (caller ms) a slot stops mattering; nil when the name is not a counter's.
local function slot_expiry(slot, value)
  local suffix = string.sub(field_of(slot), 7)
  if suffix == '!' or suffix == '~' then
    return tonumber(value)
  end
  local minute = tonumber(suffix, 36)
  return minute and minute * 60000
end

-- _lib.lua's prune, on slot names.
local function prune_slots(key, now)
  local all = redis.call('HGETALL', key)
  local stale = {}
  for i = 1, #all, 2 do
    local expiry = slot_expiry(all[i], all[i + 1])
    if expiry == nil or expiry + SLACK_MS < now then
      stale[#stale + 1] = all[i]
    end
  end
  if #stale > 0 then
    redis.call('HDEL', key, unpack(stale))
  end
end

-- Append one change of `key` (slot, value, slot, value ...) to the region's log.
local function log_change(log, key, now, changes)
  if #changes == 0 then
    return
  end
  redis.call('XADD', log, 'MAXLEN', '~', LOG_MAXLEN, '*', 'k', key, 't', int(now), unpack(changes))
  redis.call('PEXPIRE', log, LOG_TTL_MS)
end
