from __future__ import annotations

import pytest

from asynctask.settings import QueueSpec, Settings


def test_from_env_reads_asynctask_variables_with_redis_url_fallback() -> None:
    env = {"REDIS_URL": "redis://fallback:1/2", "ASYNCTASK_NAMESPACE": "myapp", "ASYNCTASK_CONCURRENCY": "3"}
    settings = Settings.from_env(env)
    assert (settings.redis_url, settings.namespace, settings.concurrency) == (
        "redis://fallback:1/2",
        "myapp",
        3,
    )
    env["ASYNCTASK_REDIS_URL"] = "redis://primary:1/0"
    assert Settings.from_env(env).redis_url == "redis://primary:1/0"


def test_explicit_overrides_win_and_none_means_unset() -> None:
    settings = Settings.from_env({"ASYNCTASK_CONCURRENCY": "3"}, concurrency=7, timeout=None)
    assert settings.concurrency == 7
    assert settings.timeout == 25.0


def test_bad_values_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="ASYNCTASK_CONCURRENCY='x' is not a valid int"):
        Settings.from_env({"ASYNCTASK_CONCURRENCY": "x"})
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        Settings.from_env({}, concurrency=0)


def test_queue_specs_and_strictness() -> None:
    assert QueueSpec.parse("critical,3") == QueueSpec("critical", 3)
    assert QueueSpec.parse("default") == QueueSpec("default", 0)
    with pytest.raises(ValueError, match="weight must be an integer"):
        QueueSpec.parse("a,b")
    assert Settings(queues=(QueueSpec("a"), QueueSpec("b"))).strict_queues
    assert not Settings(queues=(QueueSpec("a", 2), QueueSpec("b"))).strict_queues
    env = {"ASYNCTASK_QUEUES": "critical,3;default"}
    assert Settings.from_env(env).queues == (QueueSpec("critical", 3), QueueSpec("default"))
