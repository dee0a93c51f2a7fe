--- @include flow_state
-- Fair share (docs/internals/fair-share-redis.md): in a queue not listed in asynctask:fifo,
-- a task's jobs wait in their share's list; the queue's ring lists the shares with jobs
-- waiting plus "" for queue:<queue> (the jobs outside any task), and the claim serves one job
-- per member in turn. Jobs that must go ahead of the turns wait in the queue's urgent list.
-- Keys (as asynctask.keys.Keys names them):
--   <p>asynctask:fifo                   set: queues served in push order, without shares
--   <p>asynctask:shares|<queue>         list: the queue's ring ("" and the shares with jobs)
--   <p>asynctask:share|<queue>|<share>  list: a share's waiting jobs
--   <p>asynctask:urgent|<queue>         list: jobs that go ahead of the turns
--   <p>asynctask:bell|<queue>           list: tokens that wake idle claims

-- Tokens a queue's bell keeps at most: enough to wake the idle threads of several workers at
-- a burst; few enough that tokens rung while every thread was busy cost, once they go idle,
-- only a handful of claims that find nothing.
local FAIR_BELL = 64
-- Jobs one LPUSH carries at most: Lua's unpack has a limit.
local FAIR_BATCH = 1000

local function fair_key(kind, queue)
  return FLOW_PREFIX .. "asynctask:" .. kind .. "|" .. queue
end

local function share_key(queue, share)
  return FLOW_PREFIX .. "asynctask:share|" .. queue .. "|" .. share
end

-- The lists `queue`'s jobs wait in, as { key, member }: queue:<queue> first, then, while its
-- ring exists, its urgent list and each share's list (with the share's ring member).
local function fair_lists(queue)
  local lists = { { FLOW_PREFIX .. "queue:" .. queue } }
  local members = redis.call("lrange", fair_key("shares", queue), 0, -1)
  if #members > 0 then
    lists[2] = { fair_key("urgent", queue) }
  end
  for _, member in ipairs(members) do
    if member ~= "" then
      lists[#lists + 1] = { share_key(queue, member), member }
    end
  end
  return lists
end

-- Whether a task's jobs bound for `queue` wait in their share rather than in the queue.
local function fair_queue(queue)
  return redis.call("sismember", FLOW_PREFIX .. "asynctask:fifo", queue) == 0
end

-- Wake up to `n` idle threads for `n` jobs that landed outside queue:<queue>: a worker idle
-- in BLMOVE on queue:<queue> does not see them.
local function fair_bell(queue, n)
  local tokens = {}
  for i = 1, math.min(n, FAIR_BELL) do
    tokens[i] = "1"
  end
  if #tokens > 0 then
    local bell = fair_key("bell", queue)
    redis.call("lpush", bell, unpack(tokens))
    redis.call("ltrim", bell, 0, FAIR_BELL - 1)
  end
end

-- LPUSH `jobs` (first to run first) onto `key`, a list of `queue`'s outside queue:<queue>.
local function fair_push(queue, key, jobs)
  for from = 1, #jobs, FAIR_BATCH do
    redis.call("lpush", key, unpack(jobs, from, math.min(from + FAIR_BATCH - 1, #jobs)))
  end
  fair_bell(queue, #jobs)
end

-- The ring of `queue`, created with "" (queue:<queue>, first to serve) when absent; `share`,
-- if given, joins it at the end of the current round. A share is a member exactly while its
-- list holds jobs: callers add it only when they fill an empty list, the claim removes it
-- when it empties the list.
local function fair_join(queue, share)
  local ring = fair_key("shares", queue)
  if redis.call("exists", ring) == 0 then
    redis.call("rpush", ring, "")
  end
  if share then
    redis.call("lpush", ring, share)
  end
end

-- Queue `jobs` (first to run first) of `share` (a task's; "" or nil for none) bound for
-- `queue`, as one LPUSH of them onto queue:<queue> would; `urgent` (a release at a negative
-- priority): ahead of everything. Returns false, doing nothing, when the queue takes them as
-- before fair share: a fifo queue, or jobs of no share that are not urgent.
local function fair_route(queue, jobs, share, urgent)
  if share == "" then
    share = nil
  end
  if not (share or urgent) or not fair_queue(queue) then
    return false
  end
  if urgent then
    fair_push(queue, fair_key("urgent", queue), jobs)
    fair_join(queue, nil)
  else
    local key = share_key(queue, share)
    local empty = redis.call("exists", key) == 0
    fair_push(queue, key, jobs)
    if empty then
      fair_join(queue, share)
    end
  end
  redis.call("sadd", FLOW_PREFIX .. "queues", queue)
  return true
end
