"""The module ``dramatiq`` worker processes of the tests load: the tests' actors on a Redis
broker in the namespace the test gives, with AsyncTask's tracking attached (it reads its
settings from ``ASYNCTASK_*``).

``DRAMATIQ_TEST_REDIS_URL`` and ``DRAMATIQ_TEST_NAMESPACE`` name the broker's Redis and key
prefix; or ``DRAMATIQ_TEST_RABBITMQ_URL`` a RabbitMQ broker, with the actors' queue in
``DRAMATIQ_TEST_QUEUE``. ``DRAMATIQ_TEST_HEARTBEAT_MS`` shortens the time after which a worker that stopped
beating counts as dead; the broker then checks for dead workers on every command, so that
their unacknowledged messages go back to the queue within that time.
``DRAMATIQ_TEST_TRACKING=0`` leaves tracking out.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import DEFAULT_HEARTBEAT_TIMEOUT, RedisBroker

from asynctask.integrations.dramatiq import Tracking
from tests.integrations.dramatiq_jobs import QUEUE, declare

broker: dramatiq.Broker
if "DRAMATIQ_TEST_RABBITMQ_URL" in os.environ:
    broker = RabbitmqBroker(url=os.environ["DRAMATIQ_TEST_RABBITMQ_URL"])
else:
    heartbeat = int(os.environ.get("DRAMATIQ_TEST_HEARTBEAT_MS", DEFAULT_HEARTBEAT_TIMEOUT))
    broker = RedisBroker(  # type: ignore[no-untyped-call]
        url=os.environ["DRAMATIQ_TEST_REDIS_URL"],
        namespace=os.environ["DRAMATIQ_TEST_NAMESPACE"],
        heartbeat_timeout=heartbeat,
        # Out of a million: every command looks for dead workers when the heartbeat is short.
        maintenance_chance=1_000_000 if heartbeat < DEFAULT_HEARTBEAT_TIMEOUT else 1000,
    )
if os.environ.get("DRAMATIQ_TEST_TRACKING", "1") == "1":
    broker.add_middleware(Tracking())
dramatiq.set_broker(broker)
actors = declare(broker, os.environ.get("DRAMATIQ_TEST_QUEUE", QUEUE))
