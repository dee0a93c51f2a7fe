--- @include flow_base
-- Unique jobs (docs/internals/flow-control-redis.md): a push whose `unique_key` is held pushes
-- nothing and answers the holder's jid. Keys:
--   <p>asynctask:unique:<key>       string: the holder's jid, expiring after unique_for
--   <p>asynctask:flow-used          string: set once a slot or unique key was ever taken here
local UNIQUE_LIB = nil

local function unique_lib()
  if UNIQUE_LIB then
    return UNIQUE_LIB
  end
  local flow_jid = flow_base().jid

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

  -- Take `key` for `jid` for `ttl_ms`; return nil if it took it, else the holder's jid.
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

  UNIQUE_LIB = { key = unique_key, release = unique_release, take = unique_take }
  return UNIQUE_LIB
end
