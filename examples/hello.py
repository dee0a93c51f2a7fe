"""A first job: ``asynctask worker -r examples/hello.py`` runs it."""

import time

import asynctask


@asynctask.job(retry=3)
def greet(name: str, delay: float = 0.0) -> None:
    time.sleep(delay)
    print(f"hello, {name} (job {asynctask.current_job().jid})", flush=True)
