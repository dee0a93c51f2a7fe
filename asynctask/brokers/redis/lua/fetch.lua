-- Reliable fetch: acknowledge the previous job and claim the next one, in one round trip.
--
-- KEYS[1]          in-flight list of the job being acknowledged (any key if ARGV[1] is "")
-- KEYS[2], KEYS[3] queue:<a>, asynctask:inflight|<identity>|<a>   (first queue to try)
-- KEYS[4], KEYS[5] queue:<b>, asynctask:inflight|<identity>|<b>   (next queue), ...
-- ARGV[1]          payload to acknowledge, or "" for none
--
-- The claimed job is moved (not popped) from the queue's tail into the process's private
-- in-flight list, so a crash at any point leaves it either queued or in flight, never lost.
-- Returns {index of the queue key in KEYS, payload}, or false when every queue is empty.
if ARGV[1] ~= "" then
  redis.call("lrem", KEYS[1], -1, ARGV[1])
end
for i = 2, #KEYS, 2 do
  local job = redis.call("lmove", KEYS[i], KEYS[i + 1], "RIGHT", "LEFT")
  if job then
    return {i, job}
  end
end
return false
