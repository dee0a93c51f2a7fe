--- @include feeds
--- @include tracking_seq
-- Publish a fed task's staged jobs: they become the feed's held jobs, the feed is created and
-- releases its first jobs, all in this one step (see feed_release in flow.lua).
--
-- KEYS[1]  asynctask:staging-feed:<task>: the jobs as line entries, in item order
-- KEYS[2]  asynctask:feed:<task>
-- KEYS[3]  asynctask:feed-held:<task>
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the task id
-- ARGV[3]  how many jobs KEYS[1] holds
-- ARGV[4]..ARGV[7]  parallel, interval, priority, paused ("1" or "0")
-- ARGV[8]  the task's share ("" for none): kept in the feed, so that its releases into a fair
--          queue wait in the share (see feed_send in flow.lua)
--
-- The staging list becomes the held list by RENAME (O(1) whatever the number of jobs;
-- PERSIST drops the staging expiry). Nothing happens unless the staging list holds exactly
-- its count and the task has no feed yet (a list that expired or a task already published
-- fails the call).
-- Returns the number of jobs published (held or released).
FLOW_PREFIX = ARGV[1]
local staged = redis.call("llen", KEYS[1])
if staged ~= tonumber(ARGV[3]) then
  return redis.error_reply("ERR staging list " .. KEYS[1] .. " holds " .. staged .. " jobs, expected " .. ARGV[3])
end
if redis.call("exists", KEYS[2]) == 1 or redis.call("exists", KEYS[3]) == 1 then
  return redis.error_reply("ERR task " .. ARGV[2] .. " already has a feed")
end
if staged > 0 then
  redis.call("rename", KEYS[1], KEYS[3])
  redis.call("persist", KEYS[3])
end
local feeds = feed_lib()
-- Released jobs hold feed slots: a read API clear must end each of them from now on.
redis.call("set", FLOW_PREFIX .. "asynctask:flow-used", "1")
redis.call("hset", KEYS[2], "parallel", ARGV[4], "interval", ARGV[5], "priority", ARGV[6], "paused", ARGV[7], "last", "0")
if ARGV[8] and ARGV[8] ~= "" then
  redis.call("hset", KEYS[2], "share", ARGV[8])
end
feeds.release(ARGV[2], nil)
return staged
