-- The nodes that heartbeated recently, pruning the ones that did not.
-- KEYS[1]: the heartbeat sorted set (member: node id, score: heartbeat expiry, epoch ms)
-- ARGV[1]: now, epoch ms
-- Returns: array of live node ids (expiry > now), sorted
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
return redis.call('ZRANGE', KEYS[1], 0, -1)
