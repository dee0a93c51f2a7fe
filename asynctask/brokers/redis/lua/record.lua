--- @include tracking_seq
-- Append a batch of tracking transitions to the stream, numbering them.
--
-- KEYS[1]  asynctask:tracking (stream)    KEYS[2]  asynctask:tracking:seq (counter)
-- ARGV[1]  how many transitions           ARGV[2]  their JSON array
--
-- The entry's "s" field is the number of its first transition; the n-th is s + n - 1. The
-- counter, not the clock, orders transitions, so SQL can always tell which came last.
local count = tonumber(ARGV[1])
local last = tracking_seq(KEYS[2], count)
redis.call("xadd", KEYS[1], "*", "s", last - count + 1, "d", ARGV[2])
return last
