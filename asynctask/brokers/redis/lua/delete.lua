--- @include remove_queued
-- Delete one queued job (see remove_queued).
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the queue's name
-- ARGV[3]  the payload, byte for byte
FLOW_PREFIX = ARGV[1]
return remove_queued(ARGV[2], ARGV[3], function() end)
