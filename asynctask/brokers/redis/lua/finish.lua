--- @include flow
--- @include tracking_seq
-- Take jobs out of where they are and apply flow control's end of each: a finished, dead,
-- discarded or deleted job frees its concurrency slot (promoting the next job of its key)
-- and its unique key; a job going to the retry set frees its slot only under
-- concurrency_on_failure "continue" and keeps its unique key; both free a fed job's feed slot,
-- and each feed with freed slots releases once, after the last job (see flow_end in flow.lua).
--
-- KEYS[i]                         where the i-th job is: an in-flight list, a queue, a sorted set
-- ARGV[1]                         the namespace prefix
-- ARGV[3i - 1], ARGV[3i], ARGV[3i + 1]
--                                 how to take the i-th job out of KEYS[i]: "inflight" (LREM
--                                 from the tail), "queue" (LREM from the head), "set" (ZREM)
--                                 or "none" (it is nowhere: buried straight from a read);
--                                 "end" or "retry"; the payload, byte for byte
--
-- A job that is not where the caller saw it (acknowledged, recovered or moved by another
-- process meanwhile) is left alone: its slot and unique key are not this call's to free.
-- Returns how many jobs were taken out (or found nowhere, for "none").
FLOW_PREFIX = ARGV[1]
local taken = 0
for i = 1, #KEYS do
  local kind, action, job = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  local removed
  if kind == "inflight" then
    removed = redis.call("lrem", KEYS[i], -1, job)
  elseif kind == "queue" then
    removed = redis.call("lrem", KEYS[i], 1, job)
  elseif kind == "set" then
    removed = redis.call("zrem", KEYS[i], job)
  else
    removed = 1
  end
  if removed == 1 then
    taken = taken + 1
    flow_end(job, action == "retry")
  end
end
feed_release_ended()
return taken
