--- @include flow
--- @include tracking_seq
-- Take periodic ticks: for each, if it is after its schedule's last tick, it becomes the last
-- and its job is pushed (unless the tick is skipped or the schedule paused), all in this one
-- script, so that of two workers taking the same tick exactly one pushes it.
--
-- ARGV[1]  the namespace prefix
-- ARGV[2]  now (epoch seconds)
-- ARGV[3]  the scheduler's identity, whose pass is recorded
-- ARGV[4]  how many ticks follow, 8 arguments each, a schedule's ticks oldest first:
--          name, tick (epoch seconds), jid ("" : skipped), queue, payload, "1" if the job goes
--          through flow control (a concurrency or unique key), how many tracking transitions
--          it has, and their JSON array, recorded only if the job is stored
-- Returns the jids pushed.
FLOW_PREFIX = ARGV[1]
local base = FLOW_PREFIX .. "asynctask:periodic:"
local last_key, jid_key, run_key = base .. "last", base .. "jid", base .. "run"
local paused_key = base .. "paused"
redis.call("zadd", base .. "schedulers", ARGV[2], ARGV[3])
local pushed = {}
local i = 5
for _ = 1, tonumber(ARGV[4]) do
  local name, tick, jid, queue, body, flow = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local count, transitions = tonumber(ARGV[i + 6]), ARGV[i + 7]
  i = i + 8
  local last = tonumber(redis.call("hget", last_key, name) or "")
  -- Only a declared schedule: a worker that lags behind must not bring back a forgotten one.
  local known = redis.call("zscore", base .. "declared", name)
  if known and (last == nil or tick > last) then
    redis.call("hset", last_key, name, ARGV[i - 7])
    if jid ~= "" and redis.call("sismember", paused_key, name) == 0 then
      local stored = jid
      if flow == "1" then
        stored = flow_push(body, nil, 0)
      else
        redis.call("sadd", FLOW_PREFIX .. "queues", queue)
        redis.call("lpush", FLOW_PREFIX .. "queue:" .. queue, body)
      end
      if stored == jid then
        if count > 0 then
          local sequence = FLOW_PREFIX .. "asynctask:tracking:seq"
          local seq = tracking_seq(sequence, count)
          redis.call("xadd", FLOW_PREFIX .. "asynctask:tracking", "*", "s", seq - count + 1, "d", transitions)
        end
        pushed[#pushed + 1] = jid
      end
      redis.call("hset", jid_key, name, stored)
      redis.call("hset", run_key, name, ARGV[2])
    end
  end
end
return pushed
