-- Push one job with a concurrency key or a unique key (see flow_push in flow.lua).
--
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the payload
-- ARGV[3]  when it is due ("" : now, it is runnable at once)
-- ARGV[4]  seconds until then (0 for now)
-- Returns the jid the store holds for it: its own, or the unique key's holder (then nothing
-- was pushed).
FLOW_PREFIX = ARGV[1]
local due = nil
if ARGV[3] ~= "" then
  due = tonumber(ARGV[3])
end
return flow_push(ARGV[2], due, tonumber(ARGV[4]) or 0)
