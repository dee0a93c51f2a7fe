--- @include flow
--- @include tracking_seq
-- Publish a task's staged jobs: move each staging list onto its queue, all of them or none.
--
-- KEYS[1]           queues (set of queue names)
-- KEYS[2]           asynctask:staging-flow:<task>: the jobs with a concurrency or unique key
-- KEYS[3], KEYS[4]  asynctask:staging:<task>:<a>, queue:<a>   (first queue)
-- KEYS[5], KEYS[6]  asynctask:staging:<task>:<b>, queue:<b>   (next queue), ...
-- ARGV[1]           the namespace prefix (for flow control's keys)
-- ARGV[2]           how many jobs KEYS[2] holds
-- ARGV[3], ARGV[4]  queue name <a>, how many jobs its staging list holds
-- ARGV[5], ARGV[6]  queue name <b>, ..., in the order of the keys
-- ARGV[last]        the task's share ("" for none)
--
-- In a fair queue (one not in asynctask:fifo) the jobs go, the same way, to the share's list
-- instead of queue:<queue>, and the share joins the queue's ring if its list was empty (see
-- fair_route in flow.lua); Sidekiq's own queue:<queue> is left as it was.
--
-- A staging list was built by LPUSH in item order, so it reads as one LPUSH of the whole bulk
-- would leave an empty queue: the first item at the right end, where workers pop. The effects
-- are Sidekiq's push: SADD of the queue name to `queues`, then the jobs on the queue's left end,
-- after (to the left of) the jobs already waiting. A missing queue gets the list by RENAME
-- (O(1); PERSIST drops the staging expiry); an existing one receives the jobs 1000 at a time,
-- popped from the staging list's right end (first items first) and LPUSHed in that order.
-- Nothing is moved unless every staging list holds exactly its count (a list that expired or
-- was already published fails the call) and every queue key is a list or absent.
-- The flow staging list's jobs are pushed one by one, first items first, as a push would:
-- through their key's line, and not at all when their unique key is held (by another job, or
-- by an earlier item of the same task).
-- Returns the number of jobs moved (pushed jobs: duplicates by unique key are not counted).
FLOW_PREFIX = ARGV[1]
local n = (#KEYS - 2) / 2
local share = ARGV[2 * n + 3] or ""
local function check(staging, expected)
  local staged = redis.call("llen", staging)
  if staged ~= tonumber(expected) then
    return redis.error_reply("ERR staging list " .. staging .. " holds " .. staged .. " jobs, expected " .. expected)
  end
  return nil
end
local failed = check(KEYS[2], ARGV[2])
if failed then
  return failed
end
for i = 1, n do
  failed = check(KEYS[2 * i + 1], ARGV[2 * i + 2])
  if failed then
    return failed
  end
  local kind = redis.call("type", KEYS[2 * i + 2])["ok"]
  if kind ~= "none" and kind ~= "list" then
    return redis.error_reply("WRONGTYPE " .. KEYS[2 * i + 2] .. " is a " .. kind .. ", not a list")
  end
end
local moved = 0
for i = 1, n do
  local staging, queue, name = KEYS[2 * i + 1], KEYS[2 * i + 2], ARGV[2 * i + 1]
  local count = tonumber(ARGV[2 * i + 2])
  redis.call("sadd", KEYS[1], name)
  local fair = share ~= "" and fair_queue(name)
  if fair then
    queue = share_key(name, share)
  end
  local absent = redis.call("exists", queue) == 0
  local joining = fair and absent
  if absent then
    redis.call("rename", staging, queue)
    redis.call("persist", queue)
  else
    while true do
      local slice = redis.call("rpop", staging, 1000)
      if not slice then
        break
      end
      redis.call("lpush", queue, unpack(slice))
    end
  end
  if joining then
    fair_join(name, share)
  end
  if fair then
    fair_bell(name, count)
  end
  moved = moved + count
end
local flow_share = share ~= "" and share or nil
while true do
  local job = redis.call("rpop", KEYS[2])
  if not job then
    break
  end
  local decoded = flow_base().decode(job)
  local jid = decoded and flow_base().jid(decoded)
  if flow_push(job, nil, 0, flow_share) == jid then
    moved = moved + 1
  end
end
return moved
