--- @include feeds
--- @include tracking_seq
-- Release the feeds a tick is due to look at: those whose interval has passed since a release
-- it held back, and, as a safety net, those holding jobs that no end has released for a while
-- (see feed_release in flow.lua, which sets each feed's next look or takes it out).
--
-- ARGV[1]  the namespace prefix
-- ARGV[2]  how many feeds to look at, at most
-- When nothing is due this is one ZRANGEBYSCORE.
-- Returns the number of jobs released.
FLOW_PREFIX = ARGV[1]
local index = FLOW_PREFIX .. "asynctask:feeds"
local time = redis.call("time")
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local due = redis.call("zrangebyscore", index, "-inf", string.format("%.6f", now), "LIMIT", 0, tonumber(ARGV[2]))
if #due == 0 then
  return 0
end
local feeds = feed_lib()
local released = 0
for _, task in ipairs(due) do
  if redis.call("exists", feeds.key(task)) == 1 then
    released = released + feeds.release(task, now)
  else
    redis.call("zrem", index, task)
  end
end
return released
