--- @include flow
--- @include tracking_seq
-- Cancel a feed: drop its held jobs (they never run) and its record, so that nothing is
-- released again. Its released jobs are left to the task's cancellation (workers skip them);
-- their ends find no out entry and release nothing.
--
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the task id
-- Returns the number of held jobs dropped.
FLOW_PREFIX = ARGV[1]
local lib = flow_lib()
local task = ARGV[2]
local dropped = redis.call("llen", lib.feed_held(task))
redis.call("unlink", lib.feed_key(task), lib.feed_held(task), lib.feed_out(task))
redis.call("zrem", lib.feed_index(), task)
return dropped
