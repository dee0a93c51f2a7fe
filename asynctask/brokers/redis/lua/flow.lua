--- @include flow_base
--- @include fair_share
--- @include lanes
--- @include unique
--- @include rates
--- @include feeds
-- Flow control's entry points: what the scripts that push, claim, finish or move jobs call
-- (`--- @include flow`, see scripts.py), each dispatching to the features a job uses: lanes,
-- unique keys, rate limits, feeds and fair share, each in its own file.
local FLOW_LIB = nil

local function flow_lib()
  if FLOW_LIB then
    return FLOW_LIB
  end
  local base = flow_base()
  local decode, flow_jid, flow_queue, flow_time = base.decode, base.jid, base.queue, base.time

  -- `job` ended (acknowledged, dead, discarded, deleted): free its slot and release its unique
  -- key. With `retrying`, it went to the retry set instead: it frees its slot only under
  -- concurrency_on_failure "continue", and keeps its unique key. Either way it frees its
  -- feed slot: the retry comes back through the feed's held jobs.
  local function finish(job, retrying)
    local keyed = flow_find(job, '"concurrency_key"', 1, true)
    local unique = not retrying and flow_find(job, '"unique_key"', 1, true)
    local fed = flow_find(job, 'feed"', 1, true)
    local t = decode(job)
    if not t then
      return
    end
    if keyed and (not retrying or t["concurrency_on_failure"] == "continue") then
      lanes_lib().free(t)
    end
    if unique then
      unique_lib().release(t)
    end
    if fed then
      feed_end(feed_lib().of(t), flow_jid(t))
    end
  end

  -- Postpone-or-start decision for a claimed job that carries a rate limit or unique_until.
  -- Returns the time the job is due again if its rate key is over the limit (nothing recorded),
  -- else nil after recording the start (and releasing a unique key held until start).
  local function admit(job)
    local t = decode(job)
    if not t then
      return nil
    end
    local due = t["rate_limit"] ~= nil and rates_lib().due(t)
    if due then
      return due
    end
    if t["unique_until"] == "start" then
      unique_lib().release(t)
    end
    return nil
  end

  -- Claim-time check of a job just moved into `inflight`: true to run it now; false once it
  -- went back to the schedule set, due when its rate key allows (it keeps its slot, so it goes
  -- straight back to its queue then).
  local function claim(job, inflight)
    local due = admit(job)
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
  local function push(job, due, delay, share)
    local t = decode(job)
    local jid = t and flow_jid(t)
    if t and jid then
      local seconds = t["unique_for"]
      local key = type(seconds) == "number" and seconds > 0 and unique_lib().key(t)
      if key then
        -- Bounded (ten years): SET refuses an expiry beyond its range, and "inf" is a number here.
        local ttl = math.min(math.max(1, math.ceil((seconds + delay) * 1000)), 315360000000)
        local holder = unique_lib().take(key, jid, ttl)
        if holder then
          return holder
        end
      end
    end
    if due then
      redis.call("zadd", FLOW_PREFIX .. "schedule", flow_time(due), job)
      return jid
    end
    if flow_find(job, 'feed"', 1, true) and feed_lib().rejoin(job) then
      return jid
    end
    local key, limit = nil, nil
    if t and jid then
      key, limit = lanes_lib().of(t)
    end
    if key then
      lanes_lib().enter(key, limit, t, jid, job, true)
    else
      local queue = t and flow_queue(t) or "default"
      if not (share and fair_route(queue, { job }, share, false)) then
        base.enqueue(queue, job)
      end
    end
    return jid
  end

  FLOW_LIB = { finish = finish, claim = claim, push = push }
  return FLOW_LIB
end

-- A due job from the schedule or retry set: true if it went through its key's line, false
-- if the caller is to push it to its queue (see lanes.lua's lane_route).
local function lane_route(job)
  return flow_find(job, 'concurrency_key"', 1, true) ~= nil and lanes_lib().route(job)
end

-- `job` ended, or went to the retry set when `retrying` (see finish above).
local function flow_end(job, retrying)
  if
    flow_find(job, 'concurrency_key"', 1, true)
    or (not retrying and flow_find(job, 'unique_key"', 1, true))
    or flow_find(job, 'feed"', 1, true)
  then
    flow_lib().finish(job, retrying)
  end
end

-- A job just moved into `inflight` by a claim: true to run it (see claim above).
local function flow_claim(job, inflight)
  if flow_find(job, 'rate_limit"', 1, true) or flow_find(job, 'unique_until"', 1, true) then
    return flow_lib().claim(job, inflight)
  end
  return true
end

-- Push a job with a concurrency or unique key (see push above); returns the stored jid.
local function flow_push(job, due, delay, share)
  return flow_lib().push(job, due, delay, share)
end
