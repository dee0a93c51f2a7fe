-- The next page of a sorted set in descending order, after the previous page.
-- KEYS[1]  the set
-- ARGV[1]  page size
-- ARGV[2]  the previous page's lowest score ("+inf" for the first page)
-- ARGV[3]… the previous page's members, the last one yielded first
-- Continuing from the rank of the last member that is still there makes the next page right
-- whatever was added or removed elsewhere meanwhile. If the whole previous page is gone (a
-- caller deleting each entry it sees), the page continues at its lowest score, inclusive:
-- entries of earlier pages with exactly that score, if any survived, are then seen again.
local n = tonumber(ARGV[1])
for i = 3, #ARGV do
  local rank = redis.call("zrevrank", KEYS[1], ARGV[i])
  if rank then
    return redis.call("zrange", KEYS[1], rank + 1, rank + n, "REV", "WITHSCORES")
  end
end
return redis.call("zrange", KEYS[1], ARGV[2], "-inf", "BYSCORE", "REV", "LIMIT", 0, n, "WITHSCORES")
