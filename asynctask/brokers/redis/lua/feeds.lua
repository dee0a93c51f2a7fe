--- @include flow_base
--- @include fair_share
--- @include lanes
-- Task feeds (docs/internals/feeds-redis.md): a fed task's jobs wait in its held list and are
-- released, at most `parallel` out at once, by the step that ends some of them. Keys:
--   <p>asynctask:feed:<task>        hash: a fed task's feed (parallel, interval, priority, paused,
--                                   last: when it last released)
--   <p>asynctask:feed-held:<task>   list: its held jobs as line entries, next first (LPOP)
--   <p>asynctask:feed-out:<task>    hash: jid -> queue of its released jobs not ended
--   <p>asynctask:feeds              sorted set: task -> when a tick is to release it

-- The release and what it needs, built on first use: the acknowledgements of plain fed jobs
-- need none of it.
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

local function feed_lib()
  if FEED_LIB then
    return FEED_LIB
  end
  local base = flow_base()
  local flow_now, flow_time, enqueue, line_entry, line_parse =
    base.now, base.time, base.enqueue, base.line_entry, base.line_parse
  local decode, flow_jid, flow_queue = base.decode, base.jid, base.queue

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
        if not (keyed and lanes_lib().release(jid, job)) then
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
    local t = decode(job)
    local task = t and feed_of(t)
    local jid = task and flow_jid(t)
    if not jid or redis.call("exists", feed_key(task)) == 0 or redis.call("hexists", feed_out(task), jid) == 1 then
      return false
    end
    redis.call("lpush", feed_held(task), line_entry(jid, flow_queue(t), job))
    feed_release(task, nil)
    return true
  end

  FEED_LIB = {
    key = feed_key,
    held = feed_held,
    out = feed_out,
    index = feed_index,
    release = feed_release,
    of = feed_of,
    rejoin = feed_rejoin,
  }
  return FEED_LIB
end

-- A due job from the schedule or retry set: true if it rejoined its feed's held jobs, false
-- if the caller is to route it as usual (see feed_rejoin).
local function feed_route(job)
  return flow_find(job, 'feed"', 1, true) ~= nil and feed_lib().rejoin(job)
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
