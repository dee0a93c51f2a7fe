--- @include feeds
--- @include tracking_seq
-- Cancel a feed: drop its held jobs (they never run) and its record, so that nothing is
-- released again. Its released jobs are left to the task's cancellation (workers skip them);
-- their ends find no out entry and release nothing.
--
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the task id
-- Returns the number of held jobs dropped.
FLOW_PREFIX = ARGV[1]
local feeds = feed_lib()
local task = ARGV[2]
local dropped = redis.call("llen", feeds.held(task))
redis.call("unlink", feeds.key(task), feeds.held(task), feeds.out(task))
redis.call("zrem", feeds.index(), task)
return dropped
