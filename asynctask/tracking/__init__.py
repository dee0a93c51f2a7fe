"""Task tracking: Task and Event rows in SQL for every tracked job, written in batches.

Worker side: ``middleware`` (what gets recorded), ``tracker`` and ``outbox`` (recording
without round trips), ``flusher`` and ``apply`` (Redis stream to SQL). Application side:
``tasks`` (create, cancel, retry), ``queries`` (the read model), ``service`` (both as one
object). Storage: ``models``, ``database``, ``migrate``.
"""
