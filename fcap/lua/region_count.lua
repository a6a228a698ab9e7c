-- region_count.lua: count.lua for one region: the impression goes into the region's
-- own slots only, and the change is logged for the replicators.
-- KEYS[1]: the counter hash; KEYS[2]: this impression's dedup mark; KEYS[3]: the change
--   log of the server (fcap.keys.change_log).
-- ARGV[1]: now_ms; ARGV[2]: impression_ms; ARGV[3]: the counting region; ARGV[4]: m,
--   the rule count; then m rules of 5 values: kind, token, size_ms, reach_ms, limit.
-- Returns: 1 counted; 0 duplicate; 2 too late for every rule (as count.lua).
-- The log entry carries each changed slot's new value, not the increment: applying it
-- twice, late or out of order changes nothing (region_apply.lua takes the max).

local key, mark, log = KEYS[1], KEYS[2], KEYS[3]
local now, t, region = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local live, last = live_rules(4, t, now)
local answer = first_count(mark, live, last, now)
if answer then
  return answer
end
prune_slots(key, now)
local changes = {}
for _, rule in ipairs(live) do
  if rule.kind == 't' then
    local slot = rule.token .. '!@' .. region
    local free_at = t + rule.size
    if tonumber(redis.call('HGET', key, slot) or '0') < free_at then
      redis.call('HSET', key, slot, int(free_at))
      changes[#changes + 1] = slot
      changes[#changes + 1] = int(free_at)
    end
  else
    local slot = bucket_field(rule, math.floor(t / rule.size)) .. '@' .. region
    changes[#changes + 1] = slot
    changes[#changes + 1] = redis.call('HINCRBY', key, slot, 1)
  end
end
keep_until(key, now, last)
log_change(log, key, now, changes)
return 1
