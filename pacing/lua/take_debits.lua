-- Take what other workers debited to this worker's leases: read and clear in one step,
-- so a debit added meanwhile is either taken now or left for the next call, never lost.
-- KEYS[1]: the worker's debits hash (field: campaign id, value: micros owed)
-- KEYS[2]: the worker's "gone" marker (same hash tag): while set, senders debit
--          their own leases instead (send_debit.lua)
-- ARGV[1]: 0 for a worker that goes on bidding (clears the marker a departed holder of
--          this worker id left); > 0 for the last take of a worker leaving: sets the
--          marker for that many ms
-- Returns: the hash as a flat list (campaign id, micros, ...), empty when none
local owed = redis.call('HGETALL', KEYS[1])
if #owed > 0 then
  redis.call('DEL', KEYS[1])
end
local leaving = tonumber(ARGV[1])
if leaving > 0 then
  redis.call('SET', KEYS[2], '1', 'PX', leaving)
else
  redis.call('DEL', KEYS[2])
end
return owed
