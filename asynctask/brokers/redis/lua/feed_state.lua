--- @include feeds
--- @include tracking_seq
-- A feed's settings and counts, read at once (constant cost: LLEN and HLEN, nothing is counted).
--
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the task id
-- Returns nil if the task has no feed, else {parallel, interval, priority, paused, held, out}.
FLOW_PREFIX = ARGV[1]
local feeds = feed_lib()
local f = redis.call("hmget", feeds.key(ARGV[2]), "parallel", "interval", "priority", "paused")
if not f[1] then
  return nil
end
return { f[1], f[2], f[3], f[4], redis.call("llen", feeds.held(ARGV[2])), redis.call("hlen", feeds.out(ARGV[2])) }
