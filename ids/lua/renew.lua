-- Renew a worker id lease still held by its owner, raising its high-water mark.
-- KEYS[1]: hash worker -> "owner|expires_ms"; KEYS[2]: hash worker -> hwm ms
-- ARGV[1]: owner token; ARGV[2]: worker; ARGV[3]: now (epoch ms); ARGV[4]: ttl ms;
-- ARGV[5]: hwm ms (the holder will issue no id in this millisecond or later)
-- Returns 1 when renewed, 0 when the lease belongs to someone else (or to nobody).
local value = redis.call('HGET', KEYS[1], ARGV[2])
if not value or string.match(value, '^(.*)|%d+$') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[1] .. '|' .. (tonumber(ARGV[3]) + tonumber(ARGV[4])))
local hwm = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
if tonumber(ARGV[5]) > hwm then redis.call('HSET', KEYS[2], ARGV[2], ARGV[5]) end
return 1
