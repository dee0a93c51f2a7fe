-- Number `count` tracking transitions: returns the last number, the first being last - count + 1.
--
-- A missing counter starts at Redis's time in microseconds, not at zero: a Redis restarted
-- empty numbers its transitions above every number it gave before (a counter would need a
-- million transitions a second to catch up with the clock), so SQL never takes a transition
-- made after the loss for an older one and skips it.
local function tracking_seq(key, count)
  if redis.call("exists", key) == 0 then
    local now = redis.call("time")
    redis.call("set", key, string.format("%.0f", tonumber(now[1]) * 1000000 + tonumber(now[2])))
  end
  return redis.call("incrby", key, count)
end
