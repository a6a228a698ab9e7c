-- Give a worker id back, recording the last millisecond its holder used.
-- KEYS[1]: hash worker -> "owner|expires_ms"; KEYS[2]: hash worker -> hwm ms
-- ARGV[1]: owner token; ARGV[2]: worker; ARGV[3]: the last ms used (exact, no more ids)
-- Returns 1 when released, 0 when the lease was no longer the owner's.
local value = redis.call('HGET', KEYS[1], ARGV[2])
if not value or string.match(value, '^(.*)|%d+$') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
