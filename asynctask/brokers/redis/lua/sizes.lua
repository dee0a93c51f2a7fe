--- @include queue_lists
-- Each queue's size: its lists' lengths added up (see queue_lists).
-- ARGV[1]  the namespace prefix
-- ARGV[2]… queue names
FLOW_PREFIX = ARGV[1]
local found = queue_lists(2)
local sizes = {}
local i = 1
while i <= #found do
  local size = 0
  for j = i + 1, i + found[i] do
    size = size + redis.call("llen", found[j])
  end
  sizes[#sizes + 1] = size
  i = i + found[i] + 1
end
return sizes
