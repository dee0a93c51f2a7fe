--- @include flow
--- @include tracking_seq
-- Claim-time flow check of a job a blocked BLMOVE just moved into an in-flight list (the
-- fetch script checks the jobs it claims itself): its rate limit and a unique key held until
-- start (see flow_claim in flow.lua).
--
-- KEYS[1]  the in-flight list holding the job
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the payload
-- Returns 1 to run it, 0 if it went back to the schedule set (over its rate limit).
FLOW_PREFIX = ARGV[1]
if flow_claim(ARGV[2], KEYS[1]) then
  return 1
end
return 0
