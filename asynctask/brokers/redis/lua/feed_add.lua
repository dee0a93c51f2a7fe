--- @include feeds
--- @include tracking_seq
-- Hold the jobs a running job added to its fed task in the task's feed, behind those it holds,
-- and release what the feed has room for; unless they were held before (the pusher died before
-- it could note the push in SQL, and another pushes them again).
--
-- KEYS[1]  the addition's marker     KEYS[2]  asynctask:feed:<task>
-- KEYS[3]  asynctask:feed-held:<task>
-- ARGV[1]  the namespace prefix      ARGV[2]  the task id      ARGV[3]  the marker's lifetime (s)
-- ARGV[4]..ARGV[6]  the feed's parallel, interval and priority as its task row last had them,
--          and ARGV[7] the task's share ("" for none): the feed is made again from them if it
--          was forgotten (a week with nothing held and nothing out)
-- ARGV[8..] the jobs as line entries, in item order
FLOW_PREFIX = ARGV[1]
if not redis.call("set", KEYS[1], "1", "NX", "EX", ARGV[3]) then
  return 0
end
local feeds = feed_lib()
if redis.call("exists", KEYS[2]) == 0 then
  redis.call("set", FLOW_PREFIX .. "asynctask:flow-used", "1")
  redis.call("hset", KEYS[2], "parallel", ARGV[4], "interval", ARGV[5], "priority", ARGV[6], "paused", "0", "last", "0")
  if ARGV[7] ~= "" then
    redis.call("hset", KEYS[2], "share", ARGV[7])
  end
end
local count = #ARGV - 7
for from = 8, #ARGV, 1000 do
  redis.call("rpush", KEYS[3], unpack(ARGV, from, math.min(from + 999, #ARGV)))
end
feeds.release(ARGV[2], nil)
return count
