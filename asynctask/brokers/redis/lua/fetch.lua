-- Reliable fetch: acknowledge finished jobs, record tracking transitions and claim up to a
-- batch of new jobs, in one round trip.
--
-- KEYS[1]           asynctask:tracking (stream)
-- KEYS[2]           asynctask:tracking:seq
-- KEYS[3]           asynctask:cancelled:generation
-- KEYS[4], KEYS[5]  queue:<a>, asynctask:inflight|<identity>|<a>   (first queue to try)
-- KEYS[6], KEYS[7]  queue:<b>, asynctask:inflight|<identity>|<b>   (next queue), ...
-- ARGV[1]           how many jobs to claim at most
-- ARGV[2]           how many transitions ARGV[3] holds (0: none)
-- ARGV[3]           the transitions' JSON array
-- ARGV[4]           how many acknowledgements follow
-- ARGV[5], ARGV[6]  index in KEYS of an in-flight list, payload to remove from it, ...
--
-- A finished job's acknowledgement and its "finish" transition are written together, so a
-- crash leaves either both (done) or neither (the job runs again and records it again).
-- A claimed job is moved (not popped) from the queue's tail into the process's private
-- in-flight list, so a crash at any point leaves it either queued or in flight, never lost.
-- Queues are tried in the order given; a batch drains the first non-empty one before the next.
-- Returns {cancel generation, index in KEYS of the job's queue, payload, index, payload, ...}.
local batch = tonumber(ARGV[1])
local transitions = tonumber(ARGV[2])
local acks = tonumber(ARGV[4])
for i = 1, acks do
  redis.call("lrem", KEYS[tonumber(ARGV[3 + 2 * i])], -1, ARGV[4 + 2 * i])
end
if transitions > 0 then
  local last = redis.call("incrby", KEYS[2], transitions)
  redis.call("xadd", KEYS[1], "*", "s", last - transitions + 1, "d", ARGV[3])
end
local claimed = { redis.call("get", KEYS[3]) or "0" }
for i = 4, #KEYS, 2 do
  while #claimed < 2 * batch + 1 do
    local job = redis.call("lmove", KEYS[i], KEYS[i + 1], "RIGHT", "LEFT")
    if not job then
      break
    end
    claimed[#claimed + 1] = i
    claimed[#claimed + 1] = job
  end
  if #claimed >= 2 * batch + 1 then
    break
  end
end
return claimed
