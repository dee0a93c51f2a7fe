--- @include flow
-- The lists where queues keep their jobs: queue:<name> and, on a fair queue, its urgent list
-- and its shares' lists (see fair_route in flow.lua); the ring names the shares with jobs
-- waiting. For the queue names ARGV[first]…: for each in turn, how many lists follow, then
-- those lists' keys: queue:<name> first, its urgent list and its shares' lists only when its
-- ring exists.
local function queue_lists(first)
  local found = {}
  for i = first, #ARGV do
    local lists = fair_lists(ARGV[i])
    found[#found + 1] = #lists
    for _, list in ipairs(lists) do
      found[#found + 1] = list[1]
    end
  end
  return found
end
