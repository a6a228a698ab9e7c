-- Replace one node's leases atomically: the node never sees half of a tick's grant.
-- KEYS[1]: the node's lease hash (field: campaign id, value: encoded lease)
-- KEYS[2]: the node's "gone" marker (same hash tag), set when it returned its leases
-- ARGV[1]: time to live of the hash, ms (the leases' own lifetime, so a stalled
--          reconciler's leases vanish with them; relative, so the server's clock
--          does not have to agree with the reconciler's)
-- ARGV[2..]: campaign id, encoded lease, campaign id, encoded lease, ...
-- Returns: the number of leases written, or -1 when the node has left (a tick that
--          read the live set before the node deregistered must not lease to it again)
if redis.call('EXISTS', KEYS[2]) == 1 then
  return -1
end
redis.call('DEL', KEYS[1])
local n = (#ARGV - 1) / 2
-- HSET in slices: unpack() of thousands of values would overflow the Lua stack.
for first = 2, #ARGV, 500 do
  redis.call('HSET', KEYS[1], unpack(ARGV, first, math.min(first + 499, #ARGV)))
end
if n > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return n
