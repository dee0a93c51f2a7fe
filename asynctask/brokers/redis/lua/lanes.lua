--- @include flow_base
-- Concurrency lanes (docs/internals/flow-control-redis.md): at most `concurrency_limit` jobs of
-- one `concurrency_key` hold a slot at once; the others wait in the key's line, first in first
-- out. Keys:
--   <p>asynctask:lanes              hash: concurrency key -> limit (keys with holders or a line)
--   <p>asynctask:lane:<key>         list: the key's waiting line (RPUSH at push, LPOP to promote)
--   <p>asynctask:holders:<key>      set: jids holding a slot of the key
--   <p>asynctask:flow-used          string: set once a slot (of a key or a feed) or unique key
--                                   was ever taken here
local LANES_LIB = nil

local function lanes_lib()
  if LANES_LIB then
    return LANES_LIB
  end
  local base = flow_base()
  local decode, flow_jid, flow_queue = base.decode, base.jid, base.queue
  local enqueue, line_entry, line_parse = base.enqueue, base.line_entry, base.line_parse

  -- The job's concurrency key and limit, or nil if it has none (or an unusable one).
  local function lane_of(t)
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
        -- Only these scripts write lines; an entry they cannot read still runs, holding nothing.
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
    local t = decode(job)
    if not t then
      return false
    end
    local key, limit = lane_of(t)
    local jid = flow_jid(t)
    if not key or not jid or redis.call("sismember", lane_holders(key), jid) == 1 then
      return false
    end
    lane_enter(key, limit, t, jid, job, false)
    return true
  end

  -- Give up the slot `t` holds, if any, and promote the next waiting job.
  local function lane_free(t)
    local key = lane_of(t)
    local jid = flow_jid(t)
    if key and jid and redis.call("srem", lane_holders(key), jid) == 1 then
      lane_fill(key)
    end
  end

  -- A released keyed job of a feed enters its key's line as a push does, unless it still holds
  -- a slot of its key (a retry under "hold"). Returns whether it did; else the caller queues it.
  local function lane_release(jid, job)
    local t = decode(job)
    local key, limit = nil, nil
    if t then
      key, limit = lane_of(t)
    end
    if key and redis.call("sismember", lane_holders(key), jid) == 0 then
      lane_enter(key, limit, t, jid, job, true)
      return true
    end
    return false
  end

  LANES_LIB = {
    of = lane_of,
    enter = lane_enter,
    route = lane_route,
    free = lane_free,
    release = lane_release,
  }
  return LANES_LIB
end
