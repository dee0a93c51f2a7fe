-- Flow control functions: concurrency lanes, rate limits and unique keys. Included by the
-- scripts that push, claim, finish or move jobs (`--- @include flow`, see scripts.py); each of
-- them sets FLOW_PREFIX (the namespace prefix) before calling anything here.
--
-- Keys are built here from the payload's fields, so they cannot be declared in KEYS: the
-- scripts are for a single Redis (no cluster). The names match asynctask.keys.Keys:
--   <p>asynctask:lanes              hash: concurrency key -> limit (keys with holders or a line)
--   <p>asynctask:lane:<key>         list: the key's waiting line (RPUSH at push, LPOP to promote)
--   <p>asynctask:holders:<key>      set: jids holding a slot of the key
--   <p>asynctask:rate:<key>         sorted set: starts of the rate key's sliding window (score: time)
--   <p>asynctask:rate-next:<key>    string: when the next postponed job of the key is due
--   <p>asynctask:unique:<key>       string: the holder's jid, expiring after unique_for
--   <p>asynctask:flow-used          string: set once a slot (of a key or a feed) or unique key
--                                   was ever taken here
--   <p>asynctask:feed:<task>        hash: a fed task's feed (parallel, interval, priority, paused,
--                                   last: when it last released)
--   <p>asynctask:feed-held:<task>   list: its held jobs as line entries, next first (LPOP)
--   <p>asynctask:feed-out:<task>    hash: jid -> queue of its released jobs not ended
--   <p>asynctask:feeds              sorted set: task -> when a tick is to release it
--
-- Nothing here may raise on a payload: a script error would fail the whole call (every claim
-- of a worker, say). Payloads are decoded under pcall and every field is type-checked; a
-- payload whose flow fields are unusable is treated as an ordinary job.
local FLOW_PREFIX = ""

-- The library proper and its feed part, each built on first use: defining their functions
-- costs microseconds, which a call that meets no flow-control job (the common case) must not pay.
local FLOW_LIB = nil
local FEED_LIB = nil

-- Feeds whose slots this script call freed and which have not released since: their task ids
-- in the order of their first end, and task -> slots freed. Every script that ends jobs calls
-- feed_release_ended once, at its end, so that a feed releases once per call however many of
-- its jobs ended in it.
local FEED_ENDED = nil
local FEED_FREED = nil

-- Set by the claim script around its feeds' release: a release may hand jobs straight to the
-- claiming process instead of queueing them (see feed_handoff_alone). Fields: budget (jobs the
-- process still wants), queues (queue name -> KEYS index of queue:<name>, its in-flight list
-- next), claimed (the script's reply), registry and identity (to register an in-flight list
-- that receives jobs), alone ("<queue>|<share>" -> cached verdict), queued (set when a release
-- queued jobs instead).
local FEED_HANDOFF = nil

-- A fed job ended or went to the retry set: it frees its feed slot, and its feed releases
-- once this call's ends are done (feed_release_ended). Only an end of a jid that is out frees
-- anything, so a slot never leaks and is never freed twice. `task` and `jid` are the job's
-- feed field and jid, decoded here or, for a plain fed job, by the worker that ran it.
local function feed_end(task, jid)
  if
    task
    and jid
    and #task > 0
    and #task <= 1000
    and #jid > 0
    and redis.call("hdel", FLOW_PREFIX .. "asynctask:feed-out:" .. task, jid) == 1
  then
    if not FEED_ENDED then
      FEED_ENDED, FEED_FREED = {}, {}
    end
    local freed = FEED_FREED[task]
    if not freed then
      FEED_ENDED[#FEED_ENDED + 1] = task
      freed = 0
    end
    FEED_FREED[task] = freed + 1
  end
end

-- Fair share (docs/internals/fair-share-redis.md): in a queue not listed in asynctask:fifo,
-- a task's jobs wait in their share's list; the queue's ring lists the shares with jobs
-- waiting plus "" for queue:<queue> (the jobs outside any task), and the claim serves one job
-- per member in turn. Jobs that must go ahead of the turns wait in the queue's urgent list.

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

-- Whether jobs of `share` (a feed's; nil for none) released into `queue` may go straight to
-- the claiming process (FEED_HANDOFF): only while nothing else waits in the queue, that is no
-- job in queue:<queue> or its urgent list and no other share in its ring. Then the claim would
-- take exactly these jobs next anyway, and handing them over saves queueing each one, taking it
-- back out and waking idle threads for it; with anything else waiting, released jobs queue and
-- take their turn, so that a feed never runs ahead of the queue's other jobs.
local function feed_handoff_alone(queue, share)
  local verdict = queue .. "|" .. (share or "")
  local alone = FEED_HANDOFF.alone[verdict]
  if alone == nil then
    alone = redis.call("llen", FLOW_PREFIX .. "queue:" .. queue) == 0
      and redis.call("exists", fair_key("urgent", queue)) == 0
    if alone then
      local members = redis.call("lrange", fair_key("shares", queue), 0, 2)
      for _, member in ipairs(members) do
        if member ~= "" and member ~= share then
          alone = false
        end
      end
    end
    FEED_HANDOFF.alone[verdict] = alone
  end
  return alone
end

-- Filled in below: the keyed jobs of a release go through their key's line.
local flow_lib

-- The feed release and what it needs, built on first use apart from the rest of the library:
-- the acknowledgements of plain fed jobs need nothing else, and building the whole library
-- costs about 10 µs of server time per call.
local function feed_lib()
  if FEED_LIB then
    return FEED_LIB
  end

  local function flow_now()
    local time = redis.call("time")
    return tonumber(time[1]) + tonumber(time[2]) / 1000000
  end

  -- Times as text with microseconds: Lua would write a number with 14 significant digits only.
  local function flow_time(seconds)
    return string.format("%.6f", seconds)
  end

  -- Push `job` onto its queue as a push does (the tail), or at its head (fetched next).
  local function enqueue(queue, job, at_head)
    redis.call("sadd", FLOW_PREFIX .. "queues", queue)
    redis.call(at_head and "rpush" or "lpush", FLOW_PREFIX .. "queue:" .. queue, job)
  end

  -- A line entry carries its job's jid and queue ahead of the payload, as
  -- "<length>:<jid><length>:<queue><payload>", so that promoting it decodes nothing.
  local function line_entry(jid, queue, job)
    return #jid .. ":" .. jid .. #queue .. ":" .. queue .. job
  end

  -- The jid, queue and payload of a line entry; nil for one that is not such an entry.
  local function line_parse(entry)
    local colon = string.find(entry, ":", 1, true)
    local n = colon and tonumber(string.sub(entry, 1, colon - 1))
    if not n then
      return nil
    end
    local after = colon + n + 1
    local second = string.find(entry, ":", after, true)
    local m = second and tonumber(string.sub(entry, after, second - 1))
    if not m then
      return nil
    end
    return string.sub(entry, colon + 1, colon + n), string.sub(entry, second + 1, second + m),
      string.sub(entry, second + m + 1)
  end

  -- Task feeds (see docs/internals/feeds-redis.md): a fed task's jobs wait in its held list
  -- and are released, at most `parallel` out at once, by the step that ends some of them.

  -- Seconds a feed with nothing held and nothing out is kept, then forgotten.
  local FEED_FORGET = 604800
  -- Seconds between two looks of a tick at a feed that holds jobs: a safety net only, the
  -- ends of its jobs release.
  local FEED_SAFETY = 30
  -- Entries one LPUSH, RPUSH or HSET of a release carries at most: Lua's unpack has a limit.
  local FEED_BATCH = 1000

  local function feed_key(task)
    return FLOW_PREFIX .. "asynctask:feed:" .. task
  end

  local function feed_held(task)
    return FLOW_PREFIX .. "asynctask:feed-held:" .. task
  end

  local function feed_out(task)
    return FLOW_PREFIX .. "asynctask:feed-out:" .. task
  end

  local function feed_index()
    return FLOW_PREFIX .. "asynctask:feeds"
  end

  -- Push `jobs[first..last]` onto `queue` in one command, in order, as that many enqueues.
  local function enqueue_all(queue, jobs, at_head)
    local key = FLOW_PREFIX .. "queue:" .. queue
    local push = at_head and "rpush" or "lpush"
    for from = 1, #jobs, FEED_BATCH do
      redis.call(push, key, unpack(jobs, from, math.min(from + FEED_BATCH - 1, #jobs)))
    end
  end

  -- Released entries go out, in order: each jid into `out`; a keyed job through its key's
  -- line as a push does (or straight to its queue when it still holds a slot of its key: a
  -- retry under "hold"), any other to its queue, at the head for a negative priority (in a
  -- fair queue: to the feed's share, or to the urgent list for a negative priority). The
  -- jobs bound for one queue are pushed together; those waiting are pushed before a keyed
  -- job enters its line, which may push too, so that the queue keeps the release order.
  local function feed_send(entries, priority, out, share)
    local at_head = priority < 0
    local slots = {}
    local queues, waiting = {}, {}
    local function push_waiting()
      for _, queue in ipairs(queues) do
        if not fair_route(queue, waiting[queue], share, at_head) then
          redis.call("sadd", FLOW_PREFIX .. "queues", queue)
          enqueue_all(queue, waiting[queue], at_head)
        end
      end
      queues, waiting = {}, {}
    end
    local handoff = FEED_HANDOFF
    local handed, handed_count = nil, 0
    for _, entry in ipairs(entries) do
      local jid, queue, job = line_parse(entry)
      local index = jid and handoff and handoff.budget > 0 and handoff.queues[queue]
      if index and feed_handoff_alone(queue, share)
        and not string.find(job, 'concurrency_key"', 1, true)
        and not string.find(job, 'rate_limit"', 1, true)
        and not string.find(job, 'unique_until"', 1, true)
      then
        slots[#slots + 1] = jid
        slots[#slots + 1] = queue
        handed = handed or {}
        local list = handed[index]
        if not list then
          list = {}
          handed[index] = list
        end
        list[#list + 1] = job
        handoff.budget = handoff.budget - 1
        handed_count = handed_count + 1
        handoff.claimed[#handoff.claimed + 1] = index
        handoff.claimed[#handoff.claimed + 1] = job
      elseif not jid then
        -- Only feed steps write held lists; an entry they cannot read still runs, holding nothing.
        push_waiting()
        enqueue("default", entry)
      else
        slots[#slots + 1] = jid
        slots[#slots + 1] = queue
        local keyed = string.find(job, 'concurrency_key"', 1, true)
        if keyed then
          push_waiting()
        end
        if not (keyed and flow_lib().feed_lane(jid, job)) then
          local jobs = waiting[queue]
          if not jobs then
            jobs = {}
            waiting[queue] = jobs
            queues[#queues + 1] = queue
          end
          jobs[#jobs + 1] = job
        end
      end
    end
    push_waiting()
    if handoff and #entries > handed_count then
      handoff.queued = true
    end
    if handed then
      for index, jobs in pairs(handed) do
        local inflight = handoff.keys[index + 1]
        for from = 1, #jobs, FEED_BATCH do
          redis.call("lpush", inflight, unpack(jobs, from, math.min(from + FEED_BATCH - 1, #jobs)))
        end
        redis.call("hset", handoff.registry, inflight, handoff.identity)
      end
    end
    for from = 1, #slots, 2 * FEED_BATCH do
      redis.call("hset", out, unpack(slots, from, math.min(from + 2 * FEED_BATCH - 1, #slots)))
    end
  end

  -- Release(feed, now): top the feed's out jobs up to `parallel` from the front of its held
  -- list, unless it is paused or its interval has not passed since its last release. Then
  -- keep the tick index and the forgetting expiry right. Returns how many were released.
  local function feed_release(task, now)
    local record = feed_key(task)
    local f = redis.call("hmget", record, "parallel", "interval", "priority", "paused", "last", "share")
    local parallel = tonumber(f[1])
    if not parallel then
      return 0
    end
    local held, out = feed_held(task), feed_out(task)
    local waiting = redis.call("llen", held)
    local running = redis.call("hlen", out)
    local paused = f[4] == "1"
    local free = parallel - running
    local interval = tonumber(f[2]) or 0
    local moved = 0
    local next_look = nil
    if not paused and waiting > 0 and free > 0 then
      now = now or flow_now()
      local last = tonumber(f[5]) or 0
      if interval > 0 and now < last + interval then
        next_look = last + interval
      else
        local entries = redis.call("lpop", held, math.min(free, waiting))
        if entries then
          feed_send(entries, tonumber(f[3]) or 0, out, f[6] or nil)
          moved = #entries
        end
        redis.call("hset", record, "last", flow_time(now))
        waiting = waiting - moved
        running = running + moved
      end
    end
    if not next_look and waiting > 0 and not paused then
      next_look = (now or flow_now()) + FEED_SAFETY
    end
    if next_look then
      redis.call("zadd", feed_index(), flow_time(next_look), task)
    else
      redis.call("zrem", feed_index(), task)
    end
    if waiting == 0 and running == 0 then
      redis.call("expire", record, FEED_FORGET)
    else
      redis.call("persist", record)
    end
    return moved
  end

  FEED_LIB = {
    now = flow_now,
    time = flow_time,
    enqueue = enqueue,
    line_entry = line_entry,
    line_parse = line_parse,
    key = feed_key,
    held = feed_held,
    out = feed_out,
    index = feed_index,
    release = feed_release,
  }
  return FEED_LIB
end

flow_lib = function()
  if FLOW_LIB then
    return FLOW_LIB
  end
  local feed = feed_lib()
  local flow_now, flow_time, enqueue, line_entry, line_parse =
    feed.now, feed.time, feed.enqueue, feed.line_entry, feed.line_parse
  local feed_key, feed_held, feed_out, feed_release = feed.key, feed.held, feed.out, feed.release

  local function flow_decode(job)
    local ok, t = pcall(cjson.decode, job)
    if ok and type(t) == "table" then
      return t
    end
    return nil
  end

  local function flow_jid(t)
    local jid = t["jid"]
    if type(jid) == "string" and #jid > 0 then
      return jid
    end
    return nil
  end

  -- The job's concurrency key and limit, or nil if it has none (or an unusable one).
  local function flow_lane(t)
    local key = t["concurrency_key"]
    if type(key) ~= "string" or #key == 0 or #key > 1000 then
      return nil
    end
    local limit = t["concurrency_limit"]
    if type(limit) ~= "number" or limit < 1 or limit ~= math.floor(limit) or limit > 1e9 then
      return nil
    end
    return key, limit
  end

  local function flow_queue(t)
    local queue = t["queue"]
    if type(queue) == "string" and #queue > 0 then
      return queue
    end
    return "default"
  end

  local function lane_line(key)
    return FLOW_PREFIX .. "asynctask:lane:" .. key
  end

  local function lane_holders(key)
    return FLOW_PREFIX .. "asynctask:holders:" .. key
  end

  local function lane_registry()
    return FLOW_PREFIX .. "asynctask:lanes"
  end

  -- Promote waiting jobs of `key` into their queues while the key has free slots; forget the
  -- key once nothing holds or waits for it (so the registry lists only busy keys).
  local function lane_fill(key)
    local line, holders = lane_line(key), lane_holders(key)
    local limit = tonumber(redis.call("hget", lane_registry(), key)) or 1
    local held = redis.call("scard", holders)
    while held < limit do
      local entry = redis.call("lpop", line)
      if not entry then
        break
      end
      local jid, queue, job = line_parse(entry)
      if jid then
        held = held + redis.call("sadd", holders, jid)
        enqueue(queue, job)
      else
        -- Only this script writes lines; an entry it cannot read still runs, holding nothing.
        enqueue("default", entry)
      end
    end
    if held == 0 and redis.call("llen", line) == 0 then
      redis.call("hdel", lane_registry(), key)
    end
  end

  -- A runnable job of `key` joins the back of the key's line, then free slots are filled:
  -- strict FIFO, whatever waited before it goes first. `limit` replaces the stored limit when
  -- `update` (a push), else only stands in for a key the registry no longer lists.
  local function lane_enter(key, limit, t, jid, job, update)
    redis.call("set", FLOW_PREFIX .. "asynctask:flow-used", "1")
    if update then
      redis.call("hset", lane_registry(), key, limit)
    else
      redis.call("hsetnx", lane_registry(), key, limit)
    end
    redis.call("rpush", lane_line(key), line_entry(jid, flow_queue(t), job))
    lane_fill(key)
  end

  -- A due keyed job from the schedule or retry set goes through its key's line unless it still
  -- holds a slot (a retry under "hold", a job postponed by its rate limit): that one goes
  -- straight to its queue. Returns false for a job this does not handle (not keyed, or keyed
  -- and holding a slot): the caller pushes it to its queue.
  local function lane_route(job)
    local t = flow_decode(job)
    if not t then
      return false
    end
    local key, limit = flow_lane(t)
    local jid = flow_jid(t)
    if not key or not jid or redis.call("sismember", lane_holders(key), jid) == 1 then
      return false
    end
    lane_enter(key, limit, t, jid, job, false)
    return true
  end

  -- Give up the slot `t` holds, if any, and promote the next waiting job.
  local function lane_free(t)
    local key = flow_lane(t)
    local jid = flow_jid(t)
    if key and jid and redis.call("srem", lane_holders(key), jid) == 1 then
      lane_fill(key)
    end
  end

  -- A released keyed job enters its key's line as a push does, unless it still holds a slot
  -- of its key (a retry under "hold"). Returns whether it did; else the caller queues it.
  local function feed_lane(jid, job)
    local t = flow_decode(job)
    local key, limit = nil, nil
    if t then
      key, limit = flow_lane(t)
    end
    if key and redis.call("sismember", lane_holders(key), jid) == 0 then
      lane_enter(key, limit, t, jid, job, true)
      return true
    end
    return false
  end

  local function unique_key(t)
    local key = t["unique_key"]
    if type(key) == "string" and #key > 0 then
      return FLOW_PREFIX .. "asynctask:unique:" .. key
    end
    return nil
  end

  -- Release `t`'s unique key only if `t` still holds it (a newer holder is left alone).
  local function unique_release(t)
    local key, jid = unique_key(t), flow_jid(t)
    if key and jid and redis.call("get", key) == jid then
      redis.call("del", key)
    end
  end

  -- Take `t`'s unique key for `ttl_ms`; return nil if taken, else the holder's jid.
  local function unique_take(key, jid, ttl_ms)
    redis.call("set", FLOW_PREFIX .. "asynctask:flow-used", "1")
    -- The holder's key may expire between the SET and the GET: then take it again.
    for _ = 1, 3 do
      if redis.call("set", key, jid, "NX", "PX", ttl_ms) then
        return nil
      end
      local holder = redis.call("get", key)
      if holder then
        return holder
      end
    end
    return nil
  end

  -- The task id in `t`'s feed field, or nil.
  local function feed_of(t)
    local task = t["feed"]
    if type(task) == "string" and #task > 0 and #task <= 1000 then
      return task
    end
    return nil
  end

  -- A fed job pushed (retried by request) or due again (from the retry or schedule set) that
  -- holds no slot of its feed joins the front of the held jobs, then the feed releases.
  -- Returns false for a job this does not handle: no feed field, its feed is gone, or it
  -- holds its slot (postponed by its rate limit); the caller pushes it as usual.
  local function feed_rejoin(job)
    local t = flow_decode(job)
    local task = t and feed_of(t)
    local jid = task and flow_jid(t)
    if not jid or redis.call("exists", feed_key(task)) == 0 or redis.call("hexists", feed_out(task), jid) == 1 then
      return false
    end
    redis.call("lpush", feed_held(task), line_entry(jid, flow_queue(t), job))
    feed_release(task, nil)
    return true
  end

  -- `job` ended (acknowledged, dead, discarded, deleted): free its slot and release its unique
  -- key. With `retrying`, it went to the retry set instead: it frees its slot only under
  -- concurrency_on_failure "continue", and keeps its unique key. Either way it frees its
  -- feed slot: the retry comes back through the feed's held jobs.
  local function flow_end(job, retrying)
    local keyed = string.find(job, '"concurrency_key"', 1, true)
    local unique = not retrying and string.find(job, '"unique_key"', 1, true)
    local fed = string.find(job, 'feed"', 1, true)
    local t = flow_decode(job)
    if not t then
      return
    end
    if keyed and (not retrying or t["concurrency_on_failure"] == "continue") then
      lane_free(t)
    end
    if unique then
      unique_release(t)
    end
    if fed then
      feed_end(feed_of(t), flow_jid(t))
    end
  end

  local RATE_WINDOWS = { s = 1, m = 60, h = 3600 }

  -- Postpone-or-start decision for a claimed job that carries a rate limit or unique_until.
  -- Returns the time the job is due again if its rate key is over the limit (nothing recorded),
  -- else nil after recording the start (and releasing a unique key held until start).
  local function flow_admit(job)
    local t = flow_decode(job)
    if not t then
      return nil
    end
    local limit, rate_key = t["rate_limit"], t["rate_key"]
    if type(limit) == "string" and type(rate_key) == "string" and #rate_key > 0 then
      local n, unit = string.match(limit, "^(%d+)/([smh])$")
      n = tonumber(n)
      if n and n >= 1 then
        local window = RATE_WINDOWS[unit]
        local log = FLOW_PREFIX .. "asynctask:rate:" .. rate_key
        local now = flow_now()
        redis.call("zremrangebyscore", log, "-inf", flow_time(now - window))
        if redis.call("zcard", log) >= n then
          -- Due when the oldest start leaves the window, and each further postponed job of the
          -- key window/n after the previous one, so that a backlog comes back spread out.
          local oldest = tonumber(redis.call("zrange", log, 0, 0, "WITHSCORES")[2])
          local next_key = FLOW_PREFIX .. "asynctask:rate-next:" .. rate_key
          local due = math.max(oldest + window, tonumber(redis.call("get", next_key)) or 0)
          local after = due + window / n
          redis.call("set", next_key, flow_time(after), "PX", math.ceil((after - now) * 1000) + 1000)
          return due
        end
        redis.call("zadd", log, flow_time(now), flow_time(now) .. ":" .. (flow_jid(t) or ""))
        redis.call("pexpire", log, window * 1000 + 1000)
      end
    end
    if t["unique_until"] == "start" then
      unique_release(t)
    end
    return nil
  end

  -- Claim-time check of a job just moved into `inflight`: true to run it now; false once it
  -- went back to the schedule set, due when its rate key allows (it keeps its slot, so it goes
  -- straight back to its queue then).
  local function flow_claim(job, inflight)
    local due = flow_admit(job)
    if not due then
      return true
    end
    -- A job another process took back meanwhile (recovery) is not this call's to move.
    if redis.call("lrem", inflight, 1, job) == 1 then
      redis.call("zadd", FLOW_PREFIX .. "schedule", flow_time(due), job)
    end
    return false
  end

  -- Push one job that has a concurrency key or a unique key: due now (`due` nil) or at `due`
  -- (`delay` seconds from now, which the unique key's expiry adds to unique_for). Returns the
  -- jid of the unique key's holder if it is taken (nothing is pushed), else the job's own jid.
  -- `share`: the task's share a job without a concurrency key waits in (nil: none).
  local function flow_push(job, due, delay, share)
    local t = flow_decode(job)
    local jid = t and flow_jid(t)
    if t and jid then
      local key, seconds = unique_key(t), t["unique_for"]
      if key and type(seconds) == "number" and seconds > 0 then
        -- Bounded (ten years): SET refuses an expiry beyond its range, and "inf" is a number here.
        local ttl = math.min(math.max(1, math.ceil((seconds + delay) * 1000)), 315360000000)
        local holder = unique_take(key, jid, ttl)
        if holder then
          return holder
        end
      end
    end
    if due then
      redis.call("zadd", FLOW_PREFIX .. "schedule", flow_time(due), job)
      return jid
    end
    if string.find(job, 'feed"', 1, true) and feed_rejoin(job) then
      return jid
    end
    local key, limit = nil, nil
    if t and jid then
      key, limit = flow_lane(t)
    end
    if key then
      lane_enter(key, limit, t, jid, job, true)
    else
      local queue = t and flow_queue(t) or "default"
      if not (share and fair_route(queue, { job }, share, false)) then
        enqueue(queue, job)
      end
    end
    return jid
  end

  FLOW_LIB = {
    decode = flow_decode,
    jid = flow_jid,
    route = lane_route,
    finish = flow_end,
    claim = flow_claim,
    push = flow_push,
    feed_lane = feed_lane,
    feed_release = feed_release,
    feed_rejoin = feed_rejoin,
    feed_key = feed_key,
    feed_held = feed_held,
    feed_out = feed_out,
    feed_index = feed.index,
  }
  return FLOW_LIB
end

-- The entry points. Each looks for the payload field names with a plain substring search
-- first and builds the library only for a payload that has them. The needles leave out the
-- opening quote: JSON is full of quotes, each a false start for the search, which made it
-- twice as slow. A false match (a string ending in one of the names) only costs a decode.
local flow_find = string.find

-- A due job from the schedule or retry set: true if it went through its key's line, false
-- if the caller is to push it to its queue (see lane_route).
local function lane_route(job)
  return flow_find(job, 'concurrency_key"', 1, true) ~= nil and flow_lib().route(job)
end

-- A due job from the schedule or retry set: true if it rejoined its feed's held jobs, false
-- if the caller is to route it as usual (see feed_rejoin).
local function feed_route(job)
  return flow_find(job, 'feed"', 1, true) ~= nil and flow_lib().feed_rejoin(job)
end

-- Release the feeds whose slots this call's ends freed (see feed_end): every script that ends
-- jobs calls this once, after its last end. Ends refill a feed's free slots in steps of a
-- tenth of parallel, at least one (the SQL broker's step too): a feed releases only once its
-- free slots reach min(step, held), so that a busy feed releases once per `step` ends instead
-- of at every end. Fewer wait for the next ends, or for the next tick, which looks at once at
-- a feed whose first unreleased slots these are and tops it up. A paused feed, or one that
-- holds nothing, goes through the release for its bookkeeping (tick index, expiry).
local function feed_release_ended()
  if not FEED_ENDED then
    return
  end
  local ended, freed = FEED_ENDED, FEED_FREED
  FEED_ENDED, FEED_FREED = nil, nil
  local feed = FLOW_PREFIX .. "asynctask:feed"
  for _, task in ipairs(ended) do
    local f = redis.call("hmget", feed .. ":" .. task, "parallel", "paused")
    local parallel = tonumber(f[1])
    if parallel then
      local waiting = redis.call("llen", feed .. "-held:" .. task)
      local free = parallel - redis.call("hlen", feed .. "-out:" .. task)
      local wanted = FEED_HANDOFF and FEED_HANDOFF.budget > 0
      if f[2] == "1" or waiting == 0 or (wanted and free > 0)
        or free >= math.min(math.max(1, math.floor(parallel / 10)), waiting) then
        feed_lib().release(task, nil)
      elseif free > 0 and free <= freed[task] then
        redis.call("zadd", FLOW_PREFIX .. "asynctask:feeds", 0, task)
      end
    end
  end
end

-- `job` ended, or went to the retry set when `retrying` (see flow_end).
local function flow_end(job, retrying)
  if
    flow_find(job, 'concurrency_key"', 1, true)
    or (not retrying and flow_find(job, 'unique_key"', 1, true))
    or flow_find(job, 'feed"', 1, true)
  then
    flow_lib().finish(job, retrying)
  end
end

-- A job just moved into `inflight` by a claim: true to run it (see flow_claim).
local function flow_claim(job, inflight)
  if flow_find(job, 'rate_limit"', 1, true) or flow_find(job, 'unique_until"', 1, true) then
    return flow_lib().claim(job, inflight)
  end
  return true
end

-- Push a job with a concurrency or unique key (see flow_push); returns the stored jid.
local function flow_push(job, due, delay, share)
  return flow_lib().push(job, due, delay, share)
end
