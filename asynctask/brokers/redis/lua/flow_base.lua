--- @include flow_state
-- What every flow-control feature uses: the time, payload fields, queue pushes and line
-- entries. Built on first use, as each feature's functions are: defining functions costs
-- microseconds, which a call that meets no flow-control job (the common case) must not pay.
local FLOW_BASE = nil

local function flow_base()
  if FLOW_BASE then
    return FLOW_BASE
  end

  local function now()
    local time = redis.call("time")
    return tonumber(time[1]) + tonumber(time[2]) / 1000000
  end

  -- Times as text with microseconds: Lua would write a number with 14 significant digits only.
  local function time(seconds)
    return string.format("%.6f", seconds)
  end

  -- Push `job` onto its queue as a push does (the tail), or at its head (fetched next).
  local function enqueue(queue, job, at_head)
    redis.call("sadd", FLOW_PREFIX .. "queues", queue)
    redis.call(at_head and "rpush" or "lpush", FLOW_PREFIX .. "queue:" .. queue, job)
  end

  -- A line entry (a key's line, a feed's held jobs) carries its job's jid and queue ahead of
  -- the payload, as "<length>:<jid><length>:<queue><payload>", so that promoting it decodes
  -- nothing.
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

  local function decode(job)
    local ok, t = pcall(cjson.decode, job)
    if ok and type(t) == "table" then
      return t
    end
    return nil
  end

  -- A job's text field, or nil if it is missing, empty or not text (a hand-written payload).
  local function text(t, field)
    local value = t[field]
    if type(value) == "string" and #value > 0 then
      return value
    end
    return nil
  end

  local function jid(t)
    return text(t, "jid")
  end

  local function queue(t)
    return text(t, "queue") or "default"
  end

  FLOW_BASE = {
    now = now,
    time = time,
    enqueue = enqueue,
    line_entry = line_entry,
    line_parse = line_parse,
    decode = decode,
    jid = jid,
    queue = queue,
  }
  return FLOW_BASE
end
