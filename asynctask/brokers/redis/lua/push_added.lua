--- @include fair_share
-- Push the jobs a running job added to its task, unless they were pushed before (the pusher
-- died before it could note the push in SQL, and another pushes them again).
--
-- KEYS[1]  the addition's marker     KEYS[2]  queues (set)     KEYS[3]  queue:<queue>
-- ARGV[1]  the namespace prefix      ARGV[2]  the marker's lifetime (s)
-- ARGV[3]  the queue's name          ARGV[4]  the task's share ("" for none)
-- ARGV[5..] the payloads, first to run first
--
-- On a fair queue the jobs wait in the task's share, as its first jobs did (fair_route);
-- elsewhere they go onto queue:<queue> as one LPUSH of them would leave it.
FLOW_PREFIX = ARGV[1]
if not redis.call("set", KEYS[1], "1", "NX", "EX", ARGV[2]) then
  return 0
end
local jobs = {}
for i = 5, #ARGV do
  jobs[#jobs + 1] = ARGV[i]
end
if not fair_route(ARGV[3], jobs, ARGV[4], false) then
  redis.call("sadd", KEYS[2], ARGV[3])
  for from = 1, #jobs, FAIR_BATCH do
    redis.call("lpush", KEYS[3], unpack(jobs, from, math.min(from + FAIR_BATCH - 1, #jobs)))
  end
end
return #jobs
