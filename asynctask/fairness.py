"""Fair share: which share of a queue a task's jobs wait in.

A fair queue serves its waiting jobs in turn by share instead of strictly in push order: one
job of each share with jobs waiting, then the next round. A tenant's tasks form one share, so
that a tenant with a large task (or many tasks) never holds the queue while another tenant's
task waits; within a tenant its jobs keep their push order. A task created without a tenant is
a share of its own, and the jobs outside any task (those a plain push sends, Sidekiq's
included) together take one more turn, in push order.
"""

from __future__ import annotations


def share_of(task_id: str, tenant: str | None) -> str:
    """The share a task's jobs wait in: its tenant's, or, without a tenant, its own."""
    return f"tenant:{tenant}" if tenant is not None else f"task:{task_id}"


def jobs_ahead(*, earlier: int, shares: int, before_in_round: int) -> int:
    """About how many jobs start before a task's next one, in a fair queue: each of the jobs
    its share holds ahead of its own (``earlier``: its tenant's earlier tasks') waits a round
    of ``shares`` jobs, and ``before_in_round`` shares come before its own in the round being
    served."""
    return max(0, earlier) * max(1, shares) + max(0, before_in_round)
