--- @include flow
-- Move one entry of a sorted set to the stopped set, rewritten, and end it as finish.lua does.
-- KEYS[1]  the set holding the entry (schedule or retry)
-- KEYS[2]  the stopped set
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the entry, byte for byte
-- ARGV[3]  now (its score in the stopped set)
-- ARGV[4]  the payload to keep
-- ARGV[5]  the entry's score as read
-- Returns 1 if it was moved, 0 if it was no longer in KEYS[1] with that score.
FLOW_PREFIX = ARGV[1]
local score = redis.call("zscore", KEYS[1], ARGV[2])
if not score or tonumber(score) ~= tonumber(ARGV[5]) then
  return 0
end
redis.call("zrem", KEYS[1], ARGV[2])
redis.call("zadd", KEYS[2], ARGV[3], ARGV[4])
flow_end(ARGV[2], false)
feed_release_ended()
return 1
