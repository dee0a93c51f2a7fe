-- Publish a task's staged jobs: move each staging list onto its queue, all of them or none.
--
-- KEYS[1]           queues (set of queue names)
-- KEYS[2], KEYS[3]  asynctask:staging:<task>:<a>, queue:<a>   (first queue)
-- KEYS[4], KEYS[5]  asynctask:staging:<task>:<b>, queue:<b>   (next queue), ...
-- ARGV[1], ARGV[2]  queue name <a>, how many jobs its staging list holds
-- ARGV[3], ARGV[4]  queue name <b>, ..., in the order of the keys
--
-- A staging list was built by LPUSH in item order, so it reads as one LPUSH of the whole bulk
-- would leave an empty queue: the first item at the right end, where workers pop. The effects
-- are Sidekiq's push: SADD of the queue name to `queues`, then the jobs on the queue's left end,
-- after (to the left of) the jobs already waiting. A missing queue gets the list by RENAME
-- (O(1); PERSIST drops the staging expiry); an existing one receives the jobs 1000 at a time,
-- popped from the staging list's right end (first items first) and LPUSHed in that order.
-- Nothing is moved unless every staging list holds exactly its count (a list that expired or
-- was already published fails the call) and every queue key is a list or absent.
-- Returns the number of jobs moved.
local n = (#KEYS - 1) / 2
for i = 1, n do
  local staged = redis.call("llen", KEYS[2 * i])
  if staged ~= tonumber(ARGV[2 * i]) then
    return redis.error_reply(
      "ERR staging list " .. KEYS[2 * i] .. " holds " .. staged .. " jobs, expected " .. ARGV[2 * i]
    )
  end
  local kind = redis.call("type", KEYS[2 * i + 1])["ok"]
  if kind ~= "none" and kind ~= "list" then
    return redis.error_reply("WRONGTYPE " .. KEYS[2 * i + 1] .. " is a " .. kind .. ", not a list")
  end
end
local moved = 0
for i = 1, n do
  local staging, queue = KEYS[2 * i], KEYS[2 * i + 1]
  redis.call("sadd", KEYS[1], ARGV[2 * i - 1])
  if redis.call("exists", queue) == 0 then
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
  moved = moved + tonumber(ARGV[2 * i])
end
return moved
