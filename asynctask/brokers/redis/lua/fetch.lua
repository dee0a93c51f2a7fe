-- Reliable fetch: acknowledge finished jobs and claim up to a batch of new ones, in one round trip.
--
-- KEYS[1], KEYS[2]  queue:<a>, asynctask:inflight|<identity>|<a>   (first queue to try)
-- KEYS[3], KEYS[4]  queue:<b>, asynctask:inflight|<identity>|<b>   (next queue), ...
-- ARGV[1]           how many jobs to claim at most
-- ARGV[2]           how many acknowledgements follow
-- ARGV[3], ARGV[4]  index in KEYS of an in-flight list, payload to remove from it, ...
--
-- A claimed job is moved (not popped) from the queue's tail into the process's private
-- in-flight list, so a crash at any point leaves it either queued or in flight, never lost.
-- Queues are tried in the order given; a batch drains the first non-empty one before the next.
-- Returns a flat list: index in KEYS of the job's queue, payload, index, payload, ...
local batch = tonumber(ARGV[1])
local acks = tonumber(ARGV[2])
for i = 1, acks do
  redis.call("lrem", KEYS[tonumber(ARGV[1 + 2 * i])], -1, ARGV[2 + 2 * i])
end
local claimed = {}
for i = 1, #KEYS, 2 do
  while #claimed < 2 * batch do
    local job = redis.call("lmove", KEYS[i], KEYS[i + 1], "RIGHT", "LEFT")
    if not job then
      break
    end
    claimed[#claimed + 1] = i
    claimed[#claimed + 1] = job
  end
  if #claimed >= 2 * batch then
    break
  end
end
return claimed
