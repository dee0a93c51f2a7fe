--- @include flow
--- @include tracking_seq
-- A feed's settings and counts, read at once (constant cost: LLEN and HLEN, nothing is counted).
--
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the task id
-- Returns nil if the task has no feed, else {parallel, interval, priority, paused, held, out}.
FLOW_PREFIX = ARGV[1]
local lib = flow_lib()
local f = redis.call("hmget", lib.feed_key(ARGV[2]), "parallel", "interval", "priority", "paused")
if not f[1] then
  return nil
end
return { f[1], f[2], f[3], f[4], redis.call("llen", lib.feed_held(ARGV[2])), redis.call("hlen", lib.feed_out(ARGV[2])) }
