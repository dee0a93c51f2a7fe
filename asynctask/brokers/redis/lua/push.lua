--- @include flow
--- @include tracking_seq
-- Push one job with a concurrency key, a unique key or a feed field (see flow_push in flow.lua).
--
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the payload
-- ARGV[3]  when it is due ("" : now, it is runnable at once)
-- ARGV[4]  seconds until then (0 for now)
-- ARGV[5]  its jid
-- ARGV[6]  how many of its tracking transitions ARGV[7] holds (0: none)
-- ARGV[7]  their JSON array, recorded as the record script does, only if the job is stored
-- Returns the jid the store holds for it: its own, or the unique key's holder (then nothing
-- was pushed).
FLOW_PREFIX = ARGV[1]
local due = nil
if ARGV[3] ~= "" then
  due = tonumber(ARGV[3])
end
local stored = flow_push(ARGV[2], due, tonumber(ARGV[4]) or 0)
-- The job's own tracking transitions, written only if it was stored: a duplicate's "enqueue"
-- would leave an event waiting for a job that never runs.
local count = tonumber(ARGV[6]) or 0
if count > 0 and stored == ARGV[5] then
  local sequence = FLOW_PREFIX .. "asynctask:tracking:seq"
  local last = tracking_seq(sequence, count)
  redis.call("xadd", FLOW_PREFIX .. "asynctask:tracking", "*", "s", last - count + 1, "d", ARGV[7])
end
return stored
