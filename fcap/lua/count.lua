-- count.lua: count one delivered impression against every rule it belongs to, once.
-- KEYS[1]: the counter hash of one user or household; KEYS[2]: this impression's dedup
--   mark on that side (fcap.keys.dedup; same slot).
-- ARGV[1]: now_ms, the caller's clock; ARGV[2]: impression_ms, the impression's own time
--   (late and out-of-order notices count in the impression's buckets); ARGV[3]: m, the
--   rule count; then m rules of 5 values: kind, token, size_ms, reach_ms, limit.
-- Returns: 1 counted; 0 duplicate (counted before, nothing changed); 2 too late for
--   every rule: its buckets expired more than SLACK_MS ago, so no check, even on a
--   bidder whose clock is behind, reads them again; nothing changed.
-- The mark lives until the impression stops counting for every rule (+ slack): after
--   that a duplicate is too late anyway, so counts stay exact whatever the delay.

local function count(key, rule, t)
  if rule.kind == 't' then
    local free_at = t + rule.size
    local before = tonumber(redis.call('HGET', key, rule.token .. '!') or '0')
    if before < free_at then
      redis.call('HSET', key, rule.token .. '!', int(free_at))
    end
    return
  end
  redis.call('HINCRBY', key, bucket_field(rule, math.floor(t / rule.size)), 1)
end

local key, mark = KEYS[1], KEYS[2]
local now, t = tonumber(ARGV[1]), tonumber(ARGV[2])
local live, last = live_rules(3, t, now)
local answer = first_count(mark, live, last, now)
if answer then
  return answer
end
prune(key, now)
for _, rule in ipairs(live) do
  count(key, rule, t)
end
keep_until(key, now, last)
return 1
