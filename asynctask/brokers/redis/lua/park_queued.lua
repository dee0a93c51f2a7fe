--- @include remove_queued
-- Remove one queued job (see remove_queued) and keep it in the stopped set, rewritten (its
-- cursor added).
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the queue's name
-- ARGV[3]  the payload, byte for byte
-- ARGV[4]  the stopped set's key
-- ARGV[5]  now (its score)
-- ARGV[6]  the payload to keep
FLOW_PREFIX = ARGV[1]
return remove_queued(ARGV[2], ARGV[3], function()
  redis.call("zadd", ARGV[4], ARGV[5], ARGV[6])
end)
