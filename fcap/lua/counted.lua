-- counted.lua: mark keys as counted on one UTC day (fcap.counted).
-- KEYS[1]: the day's counted bitmap (fcap.keys.counted).
-- ARGV[1]: the bitmap's time to live, ms (from the caller's clock: see fcap/counted.py);
--   ARGV[2..]: one bit offset per key.
-- Returns: 0.

local bitmap = KEYS[1]
for i = 2, #ARGV do
  redis.call('SETBIT', bitmap, ARGV[i], 1)
end
redis.call('PEXPIRE', bitmap, ARGV[1])
return 0
