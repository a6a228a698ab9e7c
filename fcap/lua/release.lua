-- release.lua: undo one reservation made by check.lua (the bid lost or was never sent).
-- KEYS[1]: the counter hash the reservation was made in.
-- ARGV[1]: at_ms, the now_ms of the reserving check; ARGV[2]: m, the rule count;
--   then m rules of 5 values: kind, token, size_ms, reach_ms, limit.
-- Returns: how many rules had something to undo. Not idempotent: the caller releases
--   a reservation at most once (fcap.store.Reservation enforces it).
-- A recency reservation is undone only while it is still the latest one; later ones
--   keep theirs (conservative: a cap is never loosened by someone else's release).

local function release(key, rule, at)
  if rule.kind == 't' then
    local mine = redis.call('HGET', key, rule.token .. '!')
    if not mine or tonumber(mine) ~= at + rule.size then
      return 0
    end
    local before = redis.call('HGET', key, rule.token .. '~')
    if before then
      redis.call('HSET', key, rule.token .. '!', before)
    else
      redis.call('HDEL', key, rule.token .. '!')
    end
    redis.call('HDEL', key, rule.token .. '~')
    return 1
  end
  local field = bucket_field(rule, math.floor(at / rule.size))
  local c = tonumber(redis.call('HGET', key, field) or '0')
  if c <= 0 then
    return 0
  end
  if c == 1 then
    redis.call('HDEL', key, field)
  else
    redis.call('HINCRBY', key, field, -1)
  end
  return 1
end

local key = KEYS[1]
local at = tonumber(ARGV[1])
local done = 0
local i = 3
for _ = 1, tonumber(ARGV[2]) do
  local rule
  rule, i = read_rule(i)
  done = done + release(key, rule, at)
end
return done
