from __future__ import annotations

from importlib.util import find_spec

import pytest

from asynctask import InvalidSetting
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


def test_cpu_pinning_is_on_unless_a_variable_turns_it_off() -> None:
    assert Settings.from_env({}).cpu_pinning
    assert not Settings.from_env({"ASYNCTASK_CPU_PINNING": "false"}).cpu_pinning
    with pytest.raises(ValueError, match="ASYNCTASK_CPU_PINNING='maybe' is not a boolean"):
        Settings.from_env({"ASYNCTASK_CPU_PINNING": "maybe"})


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


REDIS_SCHEMES = "redis://, rediss://, unix:// or redis+sentinel://"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ASYNCTASK_REDIS_URL": "rediss//host"}, f"is not a Redis URL: it must start with {REDIS_SCHEMES}"),
        ({"REDIS_URL": "http://host"}, f"is not a Redis URL: it must start with {REDIS_SCHEMES}"),
        (
            {"REDIS_URL": "redis://fallback", "ASYNCTASK_REDIS_URL": "redis:/x"},
            f"is not a Redis URL: it must start with {REDIS_SCHEMES}",
        ),
        (
            {"ASYNCTASK_BROKER_URL": "sqlite//jobs.db"},
            f"is not a broker URL: it must start with {REDIS_SCHEMES.replace(' or', ',')}, sqlite:// or "
            "postgresql://",
        ),
        (
            {"ASYNCTASK_DATABASE_URL": "redis://host"},
            "is not a database URL: it must start with sqlite:// or postgresql://",
        ),
        (
            {"ASYNCTASK_DATABASE_URL": "mysql://host/db"},
            "is not a database URL: it must start with sqlite:// or postgresql://",
        ),
    ],
)
def test_a_mistyped_url_names_its_variable_and_the_schemes_it_takes(
    env: dict[str, str], message: str
) -> None:
    [variable] = [name for name in env if name != "REDIS_URL"] or ["REDIS_URL"]
    with pytest.raises(InvalidSetting) as raised:
        Settings.from_env(env)
    assert raised.value.setting == variable
    text = str(raised.value)
    assert text.startswith(f"{variable} {message} (it ") and "\n" not in text
    # Not the URL: one that does not parse may hold a password.
    assert env[variable] not in text


def test_what_a_mistyped_url_starts_with_is_said() -> None:
    with pytest.raises(InvalidSetting, match=r"\(it starts with http://\)$"):
        Settings.from_env({"REDIS_URL": "http://host"})
    with pytest.raises(InvalidSetting, match=r"\(it has no scheme://\)$"):
        Settings.from_env({"REDIS_URL": "rediss//host"})


@pytest.mark.parametrize(
    ("field", "url"),
    [
        ("redis_url", "redis://localhost:6379/0"),
        ("redis_url", "rediss://user:secret@host:6380/1"),
        ("redis_url", "unix:///run/redis.sock?db=2"),
        ("broker_url", "REDIS://host"),
        ("broker_url", "sqlite:///jobs.db"),
        ("database_url", "sqlite://"),
        ("database_url", "sqlite+pysqlite:///tracking.db"),
        ("database_url", "postgresql://user@host/db"),
        ("database_url", "postgres://user@host/db"),
        ("database_url", "postgresql+psycopg://user@host/db"),
    ],
)
def test_urls_of_every_scheme_are_taken(field: str, url: str) -> None:
    variable = {"redis_url": "ASYNCTASK_REDIS_URL", "broker_url": "ASYNCTASK_BROKER_URL"}.get(
        field, "ASYNCTASK_DATABASE_URL"
    )
    assert getattr(Settings.from_env({variable: url}), field) == url


def test_a_url_made_in_code_is_checked_and_an_override_replaces_the_variable() -> None:
    with pytest.raises(InvalidSetting, match=r"^redis_url is not a Redis URL") as raised:
        Settings(redis_url="localhost:6379")
    assert raised.value.setting == "redis_url"
    settings = Settings.from_env({"ASYNCTASK_REDIS_URL": "http://host"}, redis_url="redis://host")
    assert settings.redis_url == "redis://host"


@pytest.mark.skipif(find_spec("psycopg2") is not None, reason="psycopg2 is installed: its URLs work")
def test_a_postgresql_url_of_a_driver_not_installed_says_what_to_use() -> None:
    with pytest.raises(InvalidSetting) as raised:
        Settings.from_env({"ASYNCTASK_DATABASE_URL": "postgresql+psycopg2://user@host/db"})
    assert str(raised.value) == (
        "ASYNCTASK_DATABASE_URL uses the psycopg2 driver, which is not installed; use postgresql:// "
        "(psycopg 3, installed) or install psycopg2"
    )
    assert raised.value.setting == "ASYNCTASK_DATABASE_URL"
