--- @include feeds
--- @include tracking_seq
-- Change a feed's settings and release at once what they allow (see feed_release in flow.lua).
--
-- ARGV[1]  the namespace prefix
-- ARGV[2]  the task id
-- ARGV[3], ARGV[4], ARGV[5], ARGV[6]
--          the new parallel, interval, priority and paused ("1" or "0"); "" leaves one as it is
-- ARGV[7]  how many entries to search from each end of a queue for the feed's released jobs
--          when the priority moves them to the other end
--
-- A new priority on the other side of zero moves the feed's released jobs still waiting in
-- their queues to the matching end: the head (the right end, where workers pop) for a
-- negative one, the tail for the others. Only the ARGV[7] entries nearest each end of each
-- queue are searched, so the step stays bounded on a long queue; a job deeper in it stays
-- where it is. A job is recognised by its feed field and confirmed by its jid being out.
-- In a fair queue the jobs move between the feed's share and the queue's urgent list instead
-- (see fair_route in flow.lua); those still in queue:<queue> (released while the queue was
-- fifo) move into them.
-- Returns nil if the task has no feed, else {parallel, interval, priority, paused, held, out}.
FLOW_PREFIX = ARGV[1]
local task = ARGV[2]
local feeds = feed_lib()
local record = feeds.key(task)
if redis.call("exists", record) == 0 then
  return nil
end
local old_priority = tonumber(redis.call("hget", record, "priority")) or 0
local fields = { "parallel", "interval", "priority", "paused" }
for i, field in ipairs(fields) do
  if ARGV[2 + i] ~= "" then
    redis.call("hset", record, field, ARGV[2 + i])
  end
end
local priority = tonumber(redis.call("hget", record, "priority")) or 0
local out = feeds.out(task)
if (priority < 0) ~= (old_priority < 0) and redis.call("hlen", out) > 0 then
  local reach = tonumber(ARGV[7])
  local needle = '"feed":"' .. task .. '"'
  local share = redis.call("hget", record, "share")
  local urgent = priority < 0
  local queues = {}
  for _, queue in ipairs(redis.call("hvals", out)) do
    queues[queue] = true
  end
  for queue in pairs(queues) do
    -- Where the feed's released jobs may wait: the queue itself, and in a fair queue the
    -- feed's share (when they become urgent) or the urgent list (when they no longer are).
    local sources = { FLOW_PREFIX .. "queue:" .. queue }
    if urgent and share then
      sources[2] = share_key(queue, share)
    elseif not urgent then
      sources[2] = fair_key("urgent", queue)
    end
    -- The feed's jobs in the order they would run (head first).
    local moving = {}
    for _, key in ipairs(sources) do
      local length = redis.call("llen", key)
      local found = {}
      local function look(first, last, from)
        for _, job in ipairs(redis.call("lrange", key, first, last)) do
          if string.find(job, needle, 1, true) then
            local t = flow_base().decode(job)
            local jid = t and flow_base().jid(t)
            if jid and redis.call("hexists", out, jid) == 1 then
              found[#found + 1] = { job, from }
            end
          end
        end
      end
      if length <= 2 * reach then
        look(0, -1, 1)
      else
        look(0, reach - 1, 1)
        look(-reach, -1, -1)
      end
      for i = #found, 1, -1 do
        redis.call("lrem", key, found[i][2], found[i][1])
        moving[#moving + 1] = found[i][1]
      end
    end
    if urgent and share and #moving > 0 and redis.call("exists", sources[2]) == 0 then
      -- The ring lists only shares with jobs waiting.
      redis.call("lrem", fair_key("shares", queue), 0, share)
    end
    if #moving > 0 and not fair_route(queue, moving, share, urgent) then
      -- Pushed so that they keep their order: the one nearest the head still runs first.
      local key = sources[1]
      if urgent then
        for i = #moving, 1, -1 do
          redis.call("rpush", key, moving[i])
        end
      else
        for i = 1, #moving do
          redis.call("lpush", key, moving[i])
        end
      end
    end
  end
end
feeds.release(task, nil)
local f = redis.call("hmget", record, "parallel", "interval", "priority", "paused")
return { f[1], f[2], f[3], f[4], redis.call("llen", feeds.held(task)), redis.call("hlen", out) }
