-- Return every job of an in-flight list to the tail of its queue, where it is fetched next.
--
-- KEYS[1]  asynctask:inflight|<identity>|<queue>
-- KEYS[2]  queue:<queue>
-- KEYS[3]  asynctask:inflight (registry hash: in-flight list -> owner identity)
-- KEYS[4]  the owner's process hash <identity>
-- KEYS[5]  queues (set of queue names)
-- ARGV[1]  "orphans": act only if the owner's process hash has expired (it died); "own": always
-- ARGV[2]  queue name
-- ARGV[3]  "keep" to leave the list registered (a live owner requeueing), else "forget"
--
-- Moving newest-first to the right end leaves the oldest job at the tail: order is kept.
-- Returns the number of jobs moved, or -1 if the owner is alive and ARGV[1] is "orphans".
if ARGV[1] == "orphans" and redis.call("exists", KEYS[4]) == 1 then
  return -1
end
local moved = 0
while redis.call("lmove", KEYS[1], KEYS[2], "LEFT", "RIGHT") do
  moved = moved + 1
end
if moved > 0 then
  redis.call("sadd", KEYS[5], ARGV[2])
end
if ARGV[3] ~= "keep" then
  redis.call("hdel", KEYS[3], KEYS[1])
end
return moved
