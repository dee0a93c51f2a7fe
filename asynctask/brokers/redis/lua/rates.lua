--- @include flow_base
-- Rate limits (docs/internals/flow-control-redis.md): at most n starts of a `rate_key` in a
-- sliding window of a second, a minute or an hour; a job over the limit goes back to the
-- schedule set. Keys:
--   <p>asynctask:rate:<key>         sorted set: starts of the rate key's sliding window (score: time)
--   <p>asynctask:rate-next:<key>    string: when the next postponed job of the key is due
local RATES_LIB = nil

local function rates_lib()
  if RATES_LIB then
    return RATES_LIB
  end
  local base = flow_base()
  local flow_now, flow_time, flow_jid = base.now, base.time, base.jid
  local RATE_WINDOWS = { s = 1, m = 60, h = 3600 }

  -- The time a claimed job `t` is due again if its rate key is over the limit (nothing is
  -- recorded), else nil after recording its start (nil too for a job with no usable limit).
  local function rate_due(t)
    local limit, rate_key = t["rate_limit"], t["rate_key"]
    if type(limit) ~= "string" or type(rate_key) ~= "string" or #rate_key == 0 then
      return nil
    end
    local n, unit = string.match(limit, "^(%d+)/([smh])$")
    n = tonumber(n)
    if not n or n < 1 then
      return nil
    end
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
    return nil
  end

  RATES_LIB = { due = rate_due }
  return RATES_LIB
end
