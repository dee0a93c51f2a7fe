"""Flow control: concurrency keys, rate limits and unique jobs (options and payload keys).

The brokers enforce them; see docs/guide/flow-control.md.
"""

from asynctask.flow.options import FIELDS, OPTION_NAMES, FlowOptions, parse_rate

__all__ = ["FIELDS", "OPTION_NAMES", "FlowOptions", "parse_rate"]
