--- @include flow
-- Remove one job from wherever its queue keeps it (see queue_lists) and end it, as finish.lua
-- does, after ``keep()`` (which keeps it elsewhere, if the caller wants it kept). A share whose
-- list this empties leaves the ring, which lists only shares with jobs waiting.
-- Returns 1 if it was removed, else 0.
local function remove_queued(name, job, keep)
  for _, source in ipairs(fair_lists(name)) do
    if redis.call("lrem", source[1], 1, job) == 1 then
      if source[2] and redis.call("exists", source[1]) == 0 then
        redis.call("lrem", fair_key("shares", name), 0, source[2])
      end
      keep()
      flow_end(job, false)
      feed_release_ended()
      return 1
    end
  end
  return 0
end
