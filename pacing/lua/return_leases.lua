-- A departing node gives its leases back: delete its lease hash and record, per lease,
-- what it never spent, for the reconciler to take off its exposure; all at once.
-- KEYS[1]: the node's lease hash (field: campaign id, value: "id:amount:expires:rate")
-- KEYS[2]: the node's returned hash (field: "<lease id>:<campaign id>", value: micros)
-- KEYS[3]: the node's "gone" marker: from now on the reconciler writes it no leases
-- ARGV[1]: time to live of the returned hash and the marker, ms
-- ARGV[2..]: campaign id, lease id, unspent micros of each lease the node holds
-- Returns: the number of returned records written
-- A lease in the hash that the node does not hold (written after its last refresh)
-- was never spent from: it is returned whole.
local held = {}
local fields = {}
for i = 2, #ARGV, 3 do
  held[ARGV[i]] = ARGV[i + 1]
  local unspent = math.max(tonumber(ARGV[i + 2]), 0)
  fields[ARGV[i + 1] .. ':' .. ARGV[i]] = unspent
end
local leases = redis.call('HGETALL', KEYS[1])
for i = 1, #leases, 2 do
  local campaign = leases[i]
  local lease_id, amount = string.match(leases[i + 1], '^(%d+):(%d+):')
  if lease_id ~= nil and held[campaign] ~= lease_id then
    fields[lease_id .. ':' .. campaign] = tonumber(amount)
  end
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[1])
local flat = {}
for field, micros in pairs(fields) do
  if micros > 0 then
    flat[#flat + 1] = field
    flat[#flat + 1] = string.format('%d', micros)
  end
end
for first = 1, #flat, 500 do
  redis.call('HSET', KEYS[2], unpack(flat, first, math.min(first + 499, #flat)))
end
if #flat > 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
return #flat / 2
