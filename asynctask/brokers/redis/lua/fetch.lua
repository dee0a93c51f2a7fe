--- @include flow
--- @include tracking_seq
-- Reliable fetch: acknowledge finished jobs, record tracking transitions and claim up to a
-- batch of new jobs, in one round trip.
--
-- KEYS[1]           asynctask:tracking (stream)
-- KEYS[2]           asynctask:tracking:seq
-- KEYS[3]           asynctask:cancelled:generation
-- KEYS[4]           asynctask:inflight (registry hash: in-flight list -> owner identity)
-- KEYS[5]           asynctask:paused (set of paused queue names)
-- KEYS[6], KEYS[7]  queue:<a>, asynctask:inflight|<identity>|<a>   (first queue to try)
-- KEYS[8], KEYS[9]  queue:<b>, asynctask:inflight|<identity>|<b>   (next queue), ...
-- ARGV[1]           how many jobs to claim at most
-- ARGV[2]           this process's identity
-- ARGV[3]           how many transitions ARGV[4] holds (0: none)
-- ARGV[4]           the transitions' JSON array
-- ARGV[5]           the namespace prefix (for flow control's keys)
-- ARGV[6]           how many acknowledgements follow
-- ARGV[7], ARGV[8]  index in KEYS of an in-flight list, payload to remove from it, ...; the
--                   index is negative for a job with a concurrency key, a unique key or a
--                   feed field (the caller looked, so that the other acknowledgements cost no
--                   search here)
-- ARGV[n]           after them, how many acknowledgements of fed jobs follow, each as four:
--                   index, payload, the job's feed (task id) and jid: jobs with no
--                   concurrency or unique key, whose payload the caller decoded, so that
--                   their end frees the feed slot without decoding it here
--
-- A finished job's acknowledgement and its "finish" transition are written together, so a
-- crash leaves either both (done) or neither (the job runs again and records it again).
-- A claimed job is moved (not popped) from the queue's tail into the process's private
-- in-flight list, so a crash at any point leaves it either queued or in flight, never lost.
-- An in-flight list that receives a job is registered in the same step: another process's
-- recovery may have unregistered it while this one looked dead, and an unregistered list
-- would never be recovered if this process then died.
-- Queues are tried in the order given; a batch drains the first non-empty one before the next.
-- Fair share (see fair_route in flow.lua): a queue with a ring is served from its urgent list
-- first, then one job per member of the ring in turn (LMOVE ring ring RIGHT LEFT rotates it;
-- "" stands for queue:<queue>); a member whose list this empties leaves the ring, and the
-- ring goes once only "" is left, the queue then served from queue:<queue> alone as before.
-- A queue without a ring costs one EXISTS more than before. The work per call is bounded by
-- the batch, the postpone budget and one round of the ring.
-- A paused queue is skipped whole: queue:<name>, its urgent list and its shares. Read here, in
-- the claim itself, a pause takes effect at the next claim of every process, at the cost of
-- one SCARD while no queue is paused (one SISMEMBER per queue tried otherwise).
-- Flow control: an acknowledged job ends, freeing its concurrency slot (promoting the next
-- job of its key into its queue), its unique key and its feed slot (each feed with freed
-- slots releases once, after the acknowledgements); a claimed job over its rate limit goes
-- back to the schedule set instead of being returned (see flow.lua). Only payloads that
-- contain the fields' names are decoded, and not those of plain fed jobs.
-- Returns {cancel generation, {index in KEYS of each paused queue}, index in KEYS of the job's
-- queue, payload, index, payload, ...}: the caller's idle threads block on no paused queue.
local batch = tonumber(ARGV[1])
local transitions = tonumber(ARGV[3])
FLOW_PREFIX = ARGV[5]
local acks = tonumber(ARGV[6])
local prefix_length = #FLOW_PREFIX + #"queue:"
-- The name of the queue whose key is KEYS[i].
local function queue_name(i)
  return string.sub(KEYS[i], prefix_length + 1)
end
-- Every paused queue of the call, not only those tried before the batch is full: the caller
-- must know them all to keep its threads from blocking on them.
local paused = {}
local skipped = {}
if redis.call("scard", KEYS[5]) > 0 then
  for i = 6, #KEYS, 2 do
    if redis.call("sismember", KEYS[5], queue_name(i)) == 1 then
      paused[#paused + 1] = i
      skipped[i] = true
    end
  end
end
local claimed = { redis.call("get", KEYS[3]) or "0", paused }
for i = 1, acks do
  local index, job = tonumber(ARGV[5 + 2 * i]), ARGV[6 + 2 * i]
  if index > 0 then
    redis.call("lrem", KEYS[index], -1, job)
  elseif redis.call("lrem", KEYS[-index], -1, job) == 1 then
    flow_end(job, false)
  end
end
local fed = 7 + 2 * acks
for i = fed + 1, fed + 4 * tonumber(ARGV[fed]), 4 do
  if redis.call("lrem", KEYS[tonumber(ARGV[i])], -1, ARGV[i + 1]) == 1 then
    feed_end(ARGV[i + 2], ARGV[i + 3])
  end
end
if transitions > 0 then
  local last = tracking_seq(KEYS[2], transitions)
  redis.call("xadd", KEYS[1], "*", "s", last - transitions + 1, "d", ARGV[4])
end
-- Postponing is bounded per call, so that a long queue of jobs over their rate limit does
-- not keep Redis busy in one call; the rest is postponed by the next calls.
local postpone_budget = 100
local function full()
  return #claimed >= 2 * batch + 2 or postpone_budget == 0
end
-- Move the job at `source`'s right end into KEYS[i + 1]; false when `source` is empty.
local function take(i, source)
  local job = redis.call("lmove", source, KEYS[i + 1], "RIGHT", "LEFT")
  if not job then
    return false
  end
  if flow_claim(job, KEYS[i + 1]) then
    claimed[#claimed + 1] = i
    claimed[#claimed + 1] = job
  else
    postpone_budget = postpone_budget - 1
  end
  return true
end
-- Claim from the queues, in order, until the batch is full.
local function claim_queues()
  for i = 6, #KEYS, 2 do
    if not skipped[i] then
      local before = #claimed
      local name = queue_name(i)
      local ring = fair_key("shares", name)
      -- The queue's jobs wait in shares: the urgent list first, then one job per member of the
      -- ring in turn. Whatever the queue's fair setting now, so that a queue switched to fifo
      -- still drains what waits in its shares.
      local turns = redis.call("exists", ring) == 1
      if turns then
        local urgent = fair_key("urgent", name)
        while not full() and take(i, urgent) do
        end
        -- Every member but "" holds jobs, so a round that finds none is over: at most one miss
        -- per member in a row.
        local members = redis.call("llen", ring)
        local misses = 0
        while not full() and misses < members do
          local member = redis.call("lmove", ring, ring, "RIGHT", "LEFT")
          local source = member == "" and KEYS[i] or share_key(name, member)
          if take(i, source) then
            misses = 0
          else
            misses = misses + 1
          end
          if member ~= "" and redis.call("exists", source) == 0 then
            -- The member just moved to the left end.
            redis.call("lpop", ring)
            members = members - 1
          end
        end
        if members <= 1 and redis.call("exists", urgent) == 0 then
          -- Nothing waits outside queue:<name> any more: the bell's tokens are stale, and each
          -- would only send an idle thread to a claim that finds nothing.
          redis.call("del", ring, fair_key("bell", name))
          turns = false
        end
      end
      if not turns then
        while not full() and take(i, KEYS[i]) do
        end
      end
      if #claimed > before then
        redis.call("hset", KEYS[4], KEYS[i + 1], ARGV[2])
      end
    end
    if full() then
      break
    end
  end
end
-- The queues first: jobs released before (a feed's backlog in its share included) go ahead of
-- those these acknowledgements release. Then the feeds release, handing this call what it
-- still wants (see feed_handoff_alone); if they queued jobs instead, this call claims them in
-- turn with the rest.
claim_queues()
local queued = false
if FEED_ENDED then
  -- The feeds may hand their jobs to this call: into the in-flight list of their queue, if it is
  -- one of this call's and not paused.
  local queues = {}
  for i = 6, #KEYS, 2 do
    if not skipped[i] then
      queues[queue_name(i)] = i
    end
  end
  FEED_HANDOFF = { budget = batch - (#claimed - 2) / 2, queues = queues, claimed = claimed,
    keys = KEYS, registry = KEYS[4], identity = ARGV[2], alone = {}, queued = false }
  feed_release_ended()
  queued = FEED_HANDOFF.queued
  FEED_HANDOFF = nil
end
if queued and not full() then
  claim_queues()
end
return claimed
