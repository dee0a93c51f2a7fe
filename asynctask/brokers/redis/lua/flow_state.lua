-- What the flow-control files (fair_share, lanes, unique, rates, feeds, flow) share within one
-- script call. Each script that includes them sets FLOW_PREFIX, the namespace prefix, before
-- calling anything in them.
--
-- They build keys from the payload's fields, so these cannot be declared in KEYS: the scripts
-- are for a single Redis (no cluster). Each file lists the keys it builds; the names are those
-- of asynctask.keys.Keys, and a test holds every key literal here to them.
--
-- Nothing in them may raise on a payload: a script error would fail the whole call (every claim
-- of a worker, say). Payloads are decoded under pcall and every field is type-checked; a payload
-- whose flow fields are unusable is treated as an ordinary job.
local FLOW_PREFIX = ""

-- The entry points look for the payload field names with a plain substring search first and
-- build a feature's functions only for a payload that has them. The needles leave out the
-- opening quote: JSON is full of quotes, each a false start for the search, which made it
-- twice as slow. A false match (a string ending in one of the names) only costs a decode.
local flow_find = string.find
