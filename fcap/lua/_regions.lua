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

-- The instant (caller ms) a slot stops mattering: its field's.
local function slot_expiry(slot, value)
  return field_expiry(field_of(slot), value)
end

-- _lib.lua's prune, on slot names.
local function prune_slots(key, now)
  prune_by(key, now, slot_expiry)
end

-- Append one change of `key` (slot, value, slot, value ...) to the region's log.
local function log_change(log, key, now, changes)
  if #changes == 0 then
    return
  end
  redis.call('XADD', log, 'MAXLEN', '~', LOG_MAXLEN, '*', 'k', key, 't', int(now), unpack(changes))
  redis.call('PEXPIRE', log, LOG_TTL_MS)
end
