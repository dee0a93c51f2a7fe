--- @include queue_lists
-- Where each queue keeps its jobs (see queue_lists).
-- ARGV[1]  the namespace prefix
-- ARGV[2]… queue names
FLOW_PREFIX = ARGV[1]
return queue_lists(2)
