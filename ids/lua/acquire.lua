-- Lease the lowest free Snowflake worker id.
-- KEYS[1]: hash worker -> "owner|expires_ms" (the leases)
-- KEYS[2]: hash worker -> high-water mark ms (highest ms a holder may have used)
-- ARGV[1]: owner token; ARGV[2]: now (epoch ms, the caller's clock); ARGV[3]: ttl ms;
-- ARGV[4]: number of worker ids (1024)
-- Returns {worker, hwm_ms} or {-1, 0} when every worker id is held.
local now = tonumber(ARGV[2])
local held = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local expires = tonumber(string.match(flat[i + 1], '|(%d+)$')) or 0
  if expires > now then held[tonumber(flat[i])] = true end
end
for w = 0, tonumber(ARGV[4]) - 1 do
  if not held[w] then
    redis.call('HSET', KEYS[1], w, ARGV[1] .. '|' .. (now + tonumber(ARGV[3])))
    return {w, tonumber(redis.call('HGET', KEYS[2], w) or '0')}
  end
end
return {-1, 0}
