-- Give claimed jobs back to the tail of their queues, where they are fetched next. Each job
-- moves only if it is still in its in-flight list: one acknowledged, retried or recovered by
-- another process meanwhile is not pushed a second time.
--
-- KEYS[1]                    queues (set of queue names)
-- KEYS[2i], KEYS[2i + 1]     the i-th job's in-flight list and its queue:<name>
-- ARGV[2i - 1], ARGV[2i]     the i-th job's payload and its queue name
-- Returns the number of jobs moved.
local moved = 0
for i = 1, #ARGV / 2 do
  local job = ARGV[2 * i - 1]
  if redis.call("lrem", KEYS[2 * i], -1, job) == 1 then
    redis.call("rpush", KEYS[2 * i + 1], job)
    redis.call("sadd", KEYS[1], ARGV[2 * i])
    moved = moved + 1
  end
end
return moved
