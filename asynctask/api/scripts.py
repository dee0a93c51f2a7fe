"""Lua for sorted sets: moves that are all or nothing, and pages that survive concurrent changes.

Kept inline rather than in a ``.lua`` file so that it ships with the module whatever the
package-data globs say. Moving entries to a queue reuses the poller's ``enqueue_due`` script:
"retry now" and the poller then follow one rule (the ZREM decides who pushes).
"""

from __future__ import annotations

import redis
from redis.commands.core import Script

from asynctask.brokers.redis.scripts import Scripts

# KEYS[1]  the set holding the entries (schedule, retry or dead)
# KEYS[2]  dead
# ARGV[1]  now (the entries' new score)
# ARGV[2]  entries scored at or below this are older than dead_timeout and are trimmed
# ARGV[3]  ZREMRANGEBYRANK stop, -(dead_max_jobs + 1): keeps the newest dead_max_jobs
# ARGV[4]… the members, byte for byte as stored
# An entry that is gone from KEYS[1] (moved by the poller or another caller) is skipped, so
# it is neither added twice nor resurrected. Returns the number of entries moved.
KILL = """
local moved = 0
for i = 4, #ARGV do
  if redis.call("zrem", KEYS[1], ARGV[i]) == 1 then
    redis.call("zadd", KEYS[2], ARGV[1], ARGV[i])
    moved = moved + 1
  end
end
if moved > 0 then
  redis.call("zremrangebyscore", KEYS[2], "-inf", ARGV[2])
  redis.call("zremrangebyrank", KEYS[2], 0, tonumber(ARGV[3]))
end
return moved
"""


# The next page of a sorted set in descending order, after the previous page.
# KEYS[1]  the set
# ARGV[1]  page size
# ARGV[2]  the previous page's lowest score ("+inf" for the first page)
# ARGV[3]… the previous page's members, the last one yielded first
# Continuing from the rank of the last member that is still there makes the next page right
# whatever was added or removed elsewhere meanwhile. If the whole previous page is gone (a
# caller deleting each entry it sees), the page continues at its lowest score, inclusive:
# entries of earlier pages with exactly that score, if any survived, are then seen again.
PAGE = """
local n = tonumber(ARGV[1])
for i = 3, #ARGV do
  local rank = redis.call("zrevrank", KEYS[1], ARGV[i])
  if rank then
    return redis.call("zrange", KEYS[1], rank + 1, rank + n, "REV", "WITHSCORES")
  end
end
return redis.call("zrange", KEYS[1], ARGV[2], "-inf", "BYSCORE", "REV", "LIMIT", 0, n, "WITHSCORES")
"""


class ApiScripts:
    """The scripts bound to one connection; registering costs no round trip."""

    def __init__(self, conn: redis.Redis) -> None:
        self.kill: Script = conn.register_script(KILL)
        self.page: Script = conn.register_script(PAGE)
        #: KEYS: set, queues, queue:<q> per job; ARGV: member, replacement per job, then queue names.
        self.enqueue: Script = Scripts(conn).enqueue_due
