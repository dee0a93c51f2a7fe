-- Push a task's callback job unless it was pushed before (its pusher died before it could
-- note the push in SQL, and another pushes it again).
--
-- KEYS[1]  the callback's marker     KEYS[2]  queues (set)     KEYS[3]  the job's queue (list)
-- ARGV[1]  the queue's name          ARGV[2]  the payload      ARGV[3]  the marker's lifetime (s)
if not redis.call("set", KEYS[1], "1", "NX", "EX", ARGV[3]) then
  return 0
end
redis.call("sadd", KEYS[2], ARGV[1])
redis.call("lpush", KEYS[3], ARGV[2])
return 1
