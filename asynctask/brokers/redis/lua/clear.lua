--- @include flow
--- @include tracking_seq
-- Empty a queue or a sorted set (read API "clear"), ending every job it held: each frees its
-- concurrency slot (promoting the next job of its key) and its unique key (see flow_end).
--
-- KEYS[1]  the queue (list) or sorted set to clear
-- KEYS[2]  queues (set of queue names)
-- KEYS[3]  a scratch key the entries are renamed to while they are ended
-- ARGV[1]  the namespace prefix
-- ARGV[2]  "queue" or "set"
-- ARGV[3]  the queue's name (for "queue": it leaves `queues`)
--
-- Where flow control was never used (no `asynctask:flow-used`), no entry holds anything: the
-- key is unlinked at once, as before flow control. Otherwise the entries are renamed away
-- first, so that jobs promoted into a cleared queue are kept (they were not in it), and are
-- then ended 1000 at a time: the memory used stays bounded; the time is linear in the entries,
-- a string search each (payloads without a flow field are not decoded), about 1 µs per entry.
-- A queue's jobs waiting outside queue:<queue> (its shares' lists and its urgent list, see
-- fair_route in flow.lua) are cleared with it, and its ring and bell deleted; each list is
-- renamed away (KEYS[3], then KEYS[3] .. "|<n>") before any job ends.
-- Returns the number of entries removed.
FLOW_PREFIX = ARGV[1]
local queue = ARGV[2] == "queue"
local sources = { KEYS[1] }
local count
if queue then
  redis.call("srem", KEYS[2], ARGV[3])
  -- KEYS[1] is queue:<queue>, the first of the queue's lists.
  local lists = fair_lists(ARGV[3])
  for n = 2, #lists do
    sources[n] = lists[n][1]
  end
  redis.call("del", fair_key("shares", ARGV[3]), fair_key("bell", ARGV[3]))
  count = 0
  for _, source in ipairs(sources) do
    count = count + redis.call("llen", source)
  end
else
  count = redis.call("zcard", KEYS[1])
end
if count == 0 then
  return 0
end
if redis.call("exists", FLOW_PREFIX .. "asynctask:flow-used") == 0 then
  redis.call("unlink", unpack(sources))
  return count
end
local scratches = {}
for n, source in ipairs(sources) do
  if redis.call("exists", source) == 1 then
    local scratch = n == 1 and KEYS[3] or KEYS[3] .. "|" .. n
    redis.call("rename", source, scratch)
    scratches[#scratches + 1] = scratch
  end
end
for _, scratch in ipairs(scratches) do
  while true do
    local slice
    if queue then
      slice = redis.call("rpop", scratch, 1000)
    else
      slice = redis.call("zpopmin", scratch, 1000)
    end
    if not slice or #slice == 0 then
      break
    end
    -- ZPOPMIN replies member, score, member, score...
    local step = queue and 1 or 2
    for i = 1, #slice, step do
      flow_end(slice[i], false)
    end
  end
end
feed_release_ended()
return count
