-- Move due jobs from `schedule` or `retry` to their queues, atomically per job.
--
-- KEYS[1]             schedule or retry (sorted set)
-- KEYS[2]             queues (set of queue names)
-- KEYS[3], KEYS[4]..  queue:<name> for each job below, in order
-- ARGV[1], ARGV[2]    the member as stored, its replacement payload ("" to drop it), ...
-- ARGV[n+1]..         the queue name of each job (same order as the queue keys)
--
-- The caller read the due members and rewrote them (fresh enqueued_at, client middleware).
-- A member another process already moved is skipped, so no job is enqueued twice, and the
-- removal and the push happen together, so none is lost between them.
-- Returns the number of jobs moved.
local count = #KEYS - 2
local moved = 0
for i = 1, count do
  local member = ARGV[2 * i - 1]
  local replacement = ARGV[2 * i]
  if redis.call("zrem", KEYS[1], member) == 1 and replacement ~= "" then
    redis.call("sadd", KEYS[2], ARGV[2 * count + i])
    redis.call("lpush", KEYS[2 + i], replacement)
    moved = moved + 1
  end
end
return moved
