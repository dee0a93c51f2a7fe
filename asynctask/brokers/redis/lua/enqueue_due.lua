--- @include flow
--- @include tracking_seq
-- Move due jobs from `schedule` or `retry` to their queues, atomically per job.
--
-- KEYS[1]             schedule or retry (sorted set)
-- KEYS[2]             queues (set of queue names)
-- KEYS[3], KEYS[4]..  queue:<name> for each job below, in order
-- ARGV[1], ARGV[2]    the member as stored, its replacement payload ("" to drop it), ...
-- ARGV[n+1]..         the queue name of each job (same order as the queue keys)
-- ARGV[3n+1]          the namespace prefix (for flow control's keys)
--
-- The caller read the due members and rewrote them (fresh enqueued_at, client middleware).
-- A member another process already moved is skipped, so no job is enqueued twice, and the
-- removal and the push happen together, so none is lost between them.
-- A job with a concurrency key that holds no slot of it (scheduled, retried under
-- "continue", or from the dead set) joins its key's line instead (see lane_route in flow.lua).
-- A job of a feed that holds no slot of it (retried, scheduled) rejoins the front of the
-- feed's held jobs and the feed releases, in this same step (see feed_rejoin in flow.lua).
-- Returns the number of jobs moved.
local count = #KEYS - 2
FLOW_PREFIX = ARGV[3 * count + 1]
local moved = 0
for i = 1, count do
  local member = ARGV[2 * i - 1]
  local replacement = ARGV[2 * i]
  if redis.call("zrem", KEYS[1], member) == 1 and replacement ~= "" then
    if not feed_route(replacement) and not lane_route(replacement) then
      redis.call("sadd", KEYS[2], ARGV[2 * count + i])
      redis.call("lpush", KEYS[2 + i], replacement)
    end
    moved = moved + 1
  end
end
return moved
