-- Debit an impression's cost to the worker that bid, unless it has left.
-- KEYS[1]: that worker's debits hash (field: campaign id, value: micros owed)
-- KEYS[2]: its "gone" marker (same hash tag), set by its last take (take_debits.lua)
-- ARGV[1]: campaign id; ARGV[2]: micros; ARGV[3]: time to live of the hash, ms
-- Returns: 1 when recorded, 0 when the worker has left (the sender pays instead)
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
