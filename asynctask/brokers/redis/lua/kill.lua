--- @include flow
-- Move entries of a sorted set to the dead set, as the dead set's own kill does.
-- KEYS[1]  the set holding the entries (schedule, retry or dead)
-- KEYS[2]  dead
-- ARGV[1]  now (the entries' new score)
-- ARGV[2]  entries scored at or below this are older than dead_timeout and are trimmed
-- ARGV[3]  ZREMRANGEBYRANK stop, -(dead_max_jobs + 1): keeps the newest dead_max_jobs
-- ARGV[4]  the namespace prefix (for flow control's keys)
-- ARGV[5]… the members, byte for byte as stored
-- An entry that is gone from KEYS[1] (moved by the poller or another caller) is skipped, so
-- it is neither added twice nor resurrected. A killed job ends: it frees its concurrency slot
-- and unique key (flow_end). Returns the number of entries moved.
FLOW_PREFIX = ARGV[4]
local moved = 0
for i = 5, #ARGV do
  if redis.call("zrem", KEYS[1], ARGV[i]) == 1 then
    redis.call("zadd", KEYS[2], ARGV[1], ARGV[i])
    flow_end(ARGV[i], false)
    moved = moved + 1
  end
end
feed_release_ended()
if moved > 0 then
  redis.call("zremrangebyscore", KEYS[2], "-inf", ARGV[2])
  redis.call("zremrangebyrank", KEYS[2], 0, tonumber(ARGV[3]))
end
return moved
