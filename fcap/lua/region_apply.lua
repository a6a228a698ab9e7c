-- region_apply.lua: apply one replicated change: each slot becomes the larger of its
-- value here and the value sent (a grow-only merge: idempotent, order-free).
-- KEYS[1]: the counter hash.
-- ARGV[1]: now_ms (the replicator's clock); ARGV[2..]: slot, value, slot, value ...
-- Returns: how many slots grew. Slots already expired (past SLACK_MS) are skipped,
--   so a change replicated after its bucket ended leaves nothing behind.

local key = KEYS[1]
local now = tonumber(ARGV[1])
local grew, last = 0, 0
for i = 2, #ARGV, 2 do
  local slot, value = ARGV[i], tonumber(ARGV[i + 1])
  local expiry = slot_expiry(slot, value)
  if expiry and expiry + SLACK_MS > now then
    if tonumber(redis.call('HGET', key, slot) or '0') < value then
      redis.call('HSET', key, slot, ARGV[i + 1])
      grew = grew + 1
    end
    last = math.max(last, expiry)
  end
end
if last > 0 then
  keep_until(key, now, last)
end
return grew
