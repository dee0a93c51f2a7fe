"""Schema-driven fuzzing of the HTTP API: schemathesis generates requests from ``/openapi.json``
(valid and invalid ones), sends them to the app in-process (WSGI) with a real bearer token, and
checks every response against the document: no 5xx, only documented status codes, content
types and headers, bodies matching their schemas, invalid input rejected, valid input accepted.

All of schemathesis' phases run (the document's examples, coverage of edge values, random
fuzzing, stateful sequences following the responses), with a fixed random state: every run sends
the same requests. The database holds real tasks (the caller's and another tenant's) and generated requests
name them now and then, so the 200/202/409 paths run as well as the 404s; the broker holds periodic
schedules, and the caller's tenant is an operator, so their list is read and queues are paused, resumed
and cleared. The stream is left out of
the generated run (a 200 stays open until its task ends) and checked explicitly, like values no
generator aims at.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema_rs
import pytest
import schemathesis
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events
from schemathesis.generation.meta import TestPhase
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.schemas import BaseSchema

from asynctask import tokens
from asynctask.periodic import Schedule
from tests.webapi.conftest import Api
from tests.webapi.test_periodic import T0, declare
from webapi.config import ApiConfig
from webapi.openapi import document

#: The fuzzer's random state, fixed so that a failure found in CI is found again locally;
#: ASYNCTASK_FUZZ_RANDOM_STATE and ASYNCTASK_FUZZ_EXAMPLES explore further (e.g. 5 random states of
#: 500 examples before a release).
RANDOM_STATE = int(os.environ.get("ASYNCTASK_FUZZ_RANDOM_STATE", "20261121"))
#: Generated requests per operation and phase (the coverage phase adds its own edge cases).
MAX_EXAMPLES = int(os.environ.get("ASYNCTASK_FUZZ_EXAMPLES", "100"))
#: Characters of a failing request shown.
MAX_SHOWN = 600
#: The app's limits: the defaults.
LIMITS = ApiConfig()
#: Jobs of tests/webapi/conftest.py that the API may submit.
JOBS = ("echo", "import_products")
CREATE = "POST /api/tasks"
#: Bodies whose options (job, chunk_size, queue, meta) are read from the query string.
QUERY_OPTION_TYPES = {"text/csv", "application/x-ndjson", "application/jsonl"}

# Hypothesis warns when it prints a large generated value; the warning is no failure.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning"
)


# --- bodies the document describes only as text ---------------------------------------------------

_cell = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)


@st.composite
def _csv_bodies(draw: st.DrawFn) -> bytes:
    """CSV files, mostly well formed (sku/price rows) and sometimes not."""
    kind = draw(st.sampled_from(["products", "any", "ragged", "latin1", "empty", "nul", "overlong"]))
    if kind == "empty":
        return b""
    if kind == "nul":
        return b"sku,price\nA\x00B,1\n"
    if kind == "overlong":
        return b"sku,price\n" + b"L" * 70_000 + b",1\n"
    if kind == "latin1":
        return "sku,price\nCAFÉ,1\n".encode("latin-1")
    if kind == "products":
        header = ["sku", "price"]
        rows = draw(
            st.lists(
                st.tuples(
                    st.text("ABC123-", min_size=1, max_size=6),
                    st.from_regex(r"-?[0-9]{1,3}(\.[0-9]{1,2})?", fullmatch=True),
                ),
                max_size=12,
            )
        )
    else:
        header = draw(st.lists(_cell, min_size=1, max_size=4))
        width = len(header) + (draw(st.sampled_from([-1, 1])) if kind == "ragged" else 0)
        rows = draw(st.lists(st.lists(_cell, min_size=max(width, 0), max_size=max(width, 0)), max_size=6))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue().encode()


@st.composite
def _ndjson_bodies(draw: st.DrawFn) -> bytes:
    """NDJSON: JSON values one per line, blank lines, and now and then a line that is not JSON."""
    values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
        ),
        max_leaves=8,
    )
    product = st.fixed_dictionaries(
        {"sku": st.text("XYZ", min_size=1, max_size=4), "price": st.sampled_from(["1", "2.50", "-3"])}
    )
    lines = draw(
        st.lists(
            st.one_of(
                product.map(json.dumps),
                values.map(json.dumps),
                st.just(""),
                st.just("{not json"),
                # Strings no store holds, and one far longer than anything shown.
                st.just('{"sku": "A\\u0000", "price": "1"}'),
                st.just('"\\ud800"'),
                st.just(json.dumps({"sku": "L" * 70_000, "price": "1"})),
            ),
            max_size=10,
        )
    )
    return "\n".join(lines).encode()


schemathesis.openapi.media_type("text/csv", _csv_bodies())
schemathesis.openapi.media_type("application/x-ndjson", _ndjson_bodies(), aliases=["application/jsonl"])


# --- the app and the schema ---------------------------------------------------------------------


@dataclass(frozen=True)
class Existing:
    #: The caller's tasks and another tenant's (which the caller must see as absent).
    task_ids: tuple[str, ...]
    #: The caller's fed task, which generated cancels leave alone: cancelled, every change to
    #: its feed would be refused (409), and the run would never reach one that succeeds.
    fed: str
    #: A real ``next`` of ``GET /api/tasks``.
    tasks_cursor: str


def _create_tasks(api: Api) -> Existing:
    """Real tasks: four of the caller's (one fed), one of another tenant."""
    ids = []
    for token, items, options in (
        (api.acme, [{"sku": "A", "price": "1"}, {"sku": "B", "price": "2"}], {}),
        (api.acme, [{"sku": "C", "price": "-1"}], {}),
        (api.acme, [{"sku": "D", "price": "4"}], {}),
        (api.acme, [{"sku": "F", "price": "6"}, {"sku": "G", "price": "7"}], {"parallel": 1}),
        (api.globex, [{"sku": "E", "price": "5"}], {}),
    ):
        response = api.post_json({"job": "import_products", "items": items, **options}, token)
        assert response.status_code == 202, response.get_json()
        ids.append(response.get_json()["task_id"])
    page = api.get("/api/tasks?limit=1").get_json()
    assert page["next"]
    return Existing(tuple(ids), ids[3], page["next"])


def _pick(value: object, choices: Sequence[Any]) -> Any:
    """One of ``choices`` or None, as a pure function of a generated value (runs are repeatable)."""
    index = zlib.crc32(repr(value).encode()) % (len(choices) + 1)
    return choices[index] if index < len(choices) else None


def _steer(existing: Existing) -> Callable[[Any, Any], Any]:
    """A map_case hook: generated task ids sometimes become real ones, job names real jobs.

    Valid requests get what the document states only in prose (for a static document cannot know
    them): a registered job, a ``chunk_size`` within the configured limit, a ``before`` cursor the
    API gave out. Cases built from earlier responses (stateful links, captured ids) keep their ids.
    """

    def map_case(context: Any, case: Any) -> Any:
        meta = case.meta
        if meta is None:
            return case
        linked = meta.phase.name == TestPhase.STATEFUL or bool(meta.pool_draws)
        if "task_id" in case.path_parameters and not linked:
            cancels = case.path.endswith("/cancel")
            choices = [i for i in existing.task_ids if not (cancels and i == existing.fed)]
            real = _pick(case.path_parameters["task_id"], choices)
            if real is not None:
                case.path_parameters = {**case.path_parameters, "task_id": real}
        for container, options in _options(case):
            if not linked and isinstance(options.get("job"), str):
                job = _pick(options["job"], JOBS)
                if job is not None:
                    setattr(case, container, {**options, "job": job})
        # Only now is it known whether the request is valid as a whole.
        if not case.meta.generation.mode.is_positive:
            return case
        for container, options in _options(case):
            changed = dict(options)
            if "job" in options and options["job"] not in JOBS:
                changed["job"] = JOBS[zlib.crc32(repr(options["job"]).encode()) % len(JOBS)]
            # JSON does not tell 2.0 from 2: an integral float is an integer to the API too.
            if isinstance(options.get("chunk_size"), int | float) and not isinstance(
                options["chunk_size"], bool
            ):
                changed["chunk_size"] = min(options["chunk_size"], LIMITS.max_chunk_size)
            if "before" in options:
                changed["before"] = existing.tasks_cursor
            changed = _steer_callbacks(_steer_flow(changed, container, case.media_type), container)
            changed = _steer_parents(changed, container, existing)
            if changed != options:
                setattr(case, container, changed)
        return case

    return map_case


#: The task options of flow control and feeds (``POST /api/tasks``).
FLOW_FIELDS = ("concurrency_key", "concurrency_limit", "concurrency_on_failure")
FEED_FIELDS = ("parallel", "interval", "priority")


def _steer_flow(options: dict[str, Any], container: str, media_type: str | None) -> dict[str, Any]:
    """What the document states of the flow and feed options only in prose: a JSON body's query
    carries none of them; a ``concurrency_key`` names only fields every item has (here: none, its
    braces escaped, so the key is the text itself), storable and within 1,000 characters; the
    other two need a key; ``interval`` and ``priority`` need ``parallel`` (a body's schema says
    so, a query's cannot)."""
    changed = dict(options)
    if container == "query" and media_type == "application/json":
        for name in (*FLOW_FIELDS, *FEED_FIELDS):
            changed.pop(name, None)
    if "parallel" not in changed:
        changed.pop("interval", None)
        changed.pop("priority", None)
    key = changed.get("concurrency_key")
    if isinstance(key, str):
        text = "".join(c for c in key[:400] if c != "\x00" and not "\ud800" <= c <= "\udfff") or "k"
        changed["concurrency_key"] = text.replace("{", "{{").replace("}", "}}")
    elif key is None:
        changed.pop("concurrency_limit", None)
        changed.pop("concurrency_on_failure", None)
    return changed


#: The callback options of ``POST /api/tasks``.
CALLBACK_FIELDS = ("on_complete", "on_success", "on_failure")


def _steer_callbacks(options: dict[str, Any], container: str) -> dict[str, Any]:
    """What the document states of the callbacks only in prose: each names a registered job (here
    ``echo``, which takes the task's summary alone, so ``callback_args`` is empty: ``[]`` as JSON
    text in a query), and ``callback_args`` needs a callback."""
    changed = dict(options)
    named = False
    for name in CALLBACK_FIELDS:
        if isinstance(changed.get(name), str):
            changed[name] = "echo"
            named = True
    if changed.get("callback_args") is not None:
        if named:
            changed["callback_args"] = "[]" if container == "query" else []
        else:
            changed.pop("callback_args")
    return changed


def _steer_parents(options: dict[str, Any], container: str, existing: Existing) -> dict[str, Any]:
    """What the document states of ``after`` only in prose: it names tasks of the caller's that
    exist (here the first one; as JSON text in a query); ``run_if`` needs it (a body's schema
    says so, a query's cannot)."""
    changed = dict(options)
    if changed.get("after") is not None:
        parents = [existing.task_ids[0]]
        changed["after"] = json.dumps(parents) if container == "query" else parents
    else:
        changed.pop("run_if", None)
    return changed


def _options(case: Any) -> list[tuple[str, dict[str, Any]]]:
    """The case's containers a hook may edit: the query, and a JSON body.

    An upload is left alone: schemathesis takes any edited body holding bytes for an invalid one
    (``_steer_uploads`` names real jobs in uploads while they are generated instead).
    """
    found = [("query", case.query)] if isinstance(case.query, dict) else []
    if isinstance(case.body, dict) and case.media_type == "application/json":
        found.append(("body", case.body))
    return found


def _steer_uploads(context: Any, strategy: Any) -> Any:
    """A before_generate_body hook: uploads name a real job now and then (a valid name stays valid)."""

    def name_job(body: Any) -> Any:
        if isinstance(body, dict) and "file" in body and isinstance(body.get("job"), str) and body["job"]:
            job = _pick(body["job"], JOBS)
            if job is not None:
                return {**body, "job": job}
        return body

    return strategy.map(name_job)


def _config(token: str | None) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            # Keep exploring an operation after a failure: one run shows every kind of failure.
            "seed": RANDOM_STATE,  # schemathesis' name for its random state
            "continue-on-failure": True,
            "generation": {
                "mode": "all",
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "database": "none",
                "allow-x00": True,
            },
            **({"auth": {"openapi": {"bearer": {"bearer": token}}}} if token else {}),
            "checks": {
                "not_a_server_error": {"enabled": True},
                "status_code_conformance": {"enabled": True},
                "content_type_conformance": {"enabled": True},
                "response_headers_conformance": {"enabled": True},
                "response_schema_conformance": {"enabled": True, "validate-formats": True},
                "negative_data_rejection": {"enabled": True},
                "positive_data_acceptance": {"enabled": True},
                "missing_required_header": {"enabled": True},
                "unsupported_method": {"enabled": True},
                "allow_header_conformance": {"enabled": True},
                "use_after_free": {"enabled": True},
                "ensure_resource_availability": {"enabled": True},
                # Its probes fail inside schemathesis' WSGI transport (it passes `max_redirects`
                # to werkzeug's test client); requests without a token are a run of their own.
                "ignored_auth": {"enabled": False},
            },
        }
    )


@pytest.fixture
def fuzz_api(make_api: Callable[..., Api]) -> Api:
    # The default limits: generated valid requests are small, but may nest deeper than the
    # small limits of the other API tests.
    return make_api(
        max_items=LIMITS.max_items,
        max_chunk_size=LIMITS.max_chunk_size,
        max_body_bytes=LIMITS.max_body_bytes,
        max_json_depth=LIMITS.max_json_depth,
        operator_tenants=("acme",),
    )


def _declare_schedules(api: Api) -> None:
    """Schedules with a job enqueued (every field set) and without one (its fields null), one paused."""
    declare(
        api.client.settings,
        Schedule("every-second", "beat", "* * * * * *"),
        Schedule("nightly", "report", "0 3 * * *", tz="Asia/Tokyo", catch_up="none"),
        Schedule("yearly", "report", "0 0 1 1 *"),
        take_at=T0 + 1.25,
        paused=("nightly",),
    )


def _excused(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """A filter_failure hook: drop failures that come from what the document can only state in
    prose (OpenAPI has no way to say it); keep every other failure.

    - A CSV or NDJSON body or an upload is a string to the document: whether its rows are well
      formed, and that such a body needs ``job`` in the query, the document says in words.
    - Items must match the job's own item schema (``GET /api/jobs``), which no static document of
      the API can hold: ``validation_failed``.
    - The query options apply to CSV and NDJSON bodies only (a JSON body or an upload carries its
      own); with another body the app refuses them, naming the option.
    - No string of the items or meta may hold U+0000 (PostgreSQL cannot store it).
    """
    if isinstance(failure, RejectedPositiveData):
        if case.media_type is not None and case.media_type != "application/json":
            return False
        if case.query and _error_field(response) in case.query:
            return False
        if "\\u0000" in json.dumps(case.body) and _error_field(response) in ("items", "meta"):
            return False
        return bool(_error_code(response) != "validation_failed")
    return True


def _error_field(response: Any) -> str | None:
    try:
        field = json.loads(response.content)["error"]["details"]["field"]
    except (ValueError, KeyError, TypeError):
        return None
    return field if isinstance(field, str) else None


def _error_code(response: Any) -> str | None:
    try:
        code = json.loads(response.content)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None


@dataclass
class Outcome:
    #: Each failure, described with the request that caused it.
    failures: list[str] = field(default_factory=list)
    #: Responses per operation and status code.
    statuses: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    seconds: float = 0.0

    def summary(self) -> str:
        lines = [f"{sum(sum(c.values()) for c in self.statuses.values())} requests in {self.seconds:.1f} s"]
        for label, counts in sorted(self.statuses.items()):
            lines.append(f"  {label}: {dict(sorted(counts.items()))}")
        return "\n".join(lines)


def run(schema: BaseSchema) -> Outcome:
    """Run every phase of schemathesis over ``schema``."""
    outcome = Outcome()
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            for case_id, interaction in recorder.interactions.items():
                if interaction.response is not None:
                    # The method sent: the coverage phase also tries methods a route lacks.
                    case = recorder.cases[case_id].value
                    label = f"{case.method.upper()} {case.path}"
                    outcome.statuses[label][interaction.response.status_code] += 1
            for case_id, checks in recorder.checks.items():
                for check in checks:
                    if check.failure_info is None:
                        continue
                    failure = check.failure_info.failure
                    curl = recorder.cases[case_id].value.as_curl_command()
                    if len(curl) > MAX_SHOWN:
                        curl = curl[:MAX_SHOWN] + "..."
                    outcome.failures.append(f"{check.name}: {failure.title}\n{failure.message}\n{curl}")
        elif isinstance(event, events.NonFatalError):
            outcome.failures.append(f"error in {event.label}: {event.info.format()}")
        elif isinstance(event, events.FatalError):
            raise event.exception
        elif isinstance(event, events.EngineFinished):
            outcome.seconds = event.running_time
    return outcome


def _schema(api: Api, token: str | None) -> BaseSchema:
    return schemathesis.openapi.from_wsgi("/openapi.json", api.app, config=_config(token))


def test_generated_requests(fuzz_api: Api) -> None:
    existing = _create_tasks(fuzz_api)
    _declare_schedules(fuzz_api)
    schema = _schema(fuzz_api, fuzz_api.acme)
    schema.hooks.register_hook_with_name(_steer(existing), "map_case")
    schema.hooks.register_hook_with_name(_steer_uploads, "before_generate_body")
    schema.hooks.register_hook_with_name(_excused, "filter_failure")
    # The page is a static file (schemathesis' WSGI transport leaves it unclosed): see test_page.
    outcome = run(schema.exclude(path=["/api/tasks/{task_id}/stream", "/"]))
    print(outcome.summary())
    assert not outcome.failures, "\n\n".join(sorted(set(outcome.failures)))
    # The run reached past the 4xx answers: tasks were created, read, cancelled and retried.
    statuses = outcome.statuses
    assert statuses[CREATE][202] > 0
    assert statuses["GET /api/tasks/{task_id}"][200] > 0
    assert statuses["GET /api/tasks/{task_id}/events"][200] > 0
    assert statuses["POST /api/tasks/{task_id}/cancel"][200] > 0
    assert statuses["POST /api/tasks/{task_id}/retry"][202] > 0
    assert statuses["PATCH /api/tasks/{task_id}"][200] > 0
    assert statuses["POST /api/tasks/{task_id}/pause"][200] > 0
    assert statuses["POST /api/tasks/{task_id}/resume"][200] > 0
    assert statuses["GET /api/periodic"][200] > 0
    assert statuses["GET /api/queues"][200] > 0
    for action in ("pause", "resume", "clear"):
        assert statuses[f"POST /api/queues/{{name}}/{action}"][200] > 0
        assert statuses[f"POST /api/queues/{{name}}/{action}"][422] > 0


@pytest.mark.parametrize("credentials", ["missing", "revoked"])
def test_generated_requests_without_a_valid_token(fuzz_api: Api, credentials: str) -> None:
    """Every /api/* request without a valid token is refused (401 and its header), whatever else
    it carries; only a method the route lacks is answered first (405)."""
    _create_tasks(fuzz_api)
    token = None
    if credentials == "revoked":
        created = tokens.create_token(fuzz_api.engine, "acme")
        assert tokens.revoke_token(fuzz_api.engine, created.id)
        token = created.token
    schema = _schema(fuzz_api, token)
    schema.config.generation.update(max_examples=10)
    outcome = run(schema.include(path_regex="^/api/"))
    print(outcome.summary())
    assert not outcome.failures, "\n\n".join(sorted(set(outcome.failures)))
    assert outcome.statuses
    paths = schema.raw_schema["paths"]
    for label, counts in outcome.statuses.items():
        method, _, path = label.partition(" ")
        if method == "OPTIONS":
            expected = {200}  # Flask answers it (a CORS preflight carries no token)
        elif method.lower() in paths[path]:
            expected = {401}
        else:
            expected = {405}  # routing comes first
        assert set(counts) == expected, (label, counts)


# --- explicit requests: the stream, the page, and values generators do not aim at ---------------


def _snapshot_validator(doc: dict[str, Any]) -> Any:
    return jsonschema_rs.validator_for(
        {"$ref": "#/components/schemas/TaskSnapshot", "components": doc["components"]}, validate_formats=True
    )


def test_stream(fuzz_api: Api) -> None:
    existing = _create_tasks(fuzz_api)
    own, other = existing.task_ids[0], existing.task_ids[-1]
    assert fuzz_api.post(f"/api/tasks/{own}/cancel").status_code == 200
    schema = _schema(fuzz_api, None)
    operation = schema["/api/tasks/{task_id}/stream"]["GET"]
    bearer = {"Authorization": f"Bearer {fuzz_api.acme}"}
    for headers, task_id, status in (
        ({}, own, 401),
        ({"Authorization": "Bearer atk_unknown"}, own, 401),
        ({"Authorization": f"Basic {fuzz_api.acme}"}, own, 401),
        (bearer, "no-such-task", 404),
        (bearer, other, 404),
        (bearer, own, 200),
    ):
        case = operation.Case(path_parameters={"task_id": task_id}, headers=headers)
        response = case.call_and_validate()
        assert response.status_code == status, (headers, task_id, response.text)
    # A cancelled task with nothing running is settled: its one snapshot is the last.
    assert response.headers["content-type"][0].startswith("text/event-stream")
    blocks = [block for block in response.text.split("\n\n") if block]
    assert blocks[0].startswith("retry: ")
    assert len(blocks) == 2 and blocks[1].startswith("event: end\ndata: ")
    task = json.loads(blocks[1].removeprefix("event: end\ndata: "))
    _snapshot_validator(schema.raw_schema).validate(task)
    assert (task["id"], task["status"]) == (own, "cancelled")


def test_periodic_schedules(fuzz_api: Api) -> None:
    """Their list as the document says, for an operator's token (the generated run's caller is
    one), and a documented refusal for another tenant's."""
    _declare_schedules(fuzz_api)
    operation = _schema(fuzz_api, None)["/api/periodic"]["GET"]
    for token, status in ((fuzz_api.acme, 200), (fuzz_api.globex, 403)):
        response = operation.Case(headers={"Authorization": f"Bearer {token}"}).call_and_validate()
        assert response.status_code == status, response.text
    listed = operation.Case(headers={"Authorization": f"Bearer {fuzz_api.acme}"}).call().json()
    assert [s["name"] for s in listed["schedules"]] == ["every-second", "nightly", "yearly"]


def test_page(fuzz_api: Api) -> None:
    response = fuzz_api.http.get("/")
    assert response.status_code == 200
    documented = schemathesis.openapi.from_dict(document())["/"]["GET"]
    assert response.mimetype in documented.definition.raw["responses"]["200"]["content"]
    response.close()


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@dataclass(frozen=True)
class Hostile:
    path: str
    method: str
    #: Statuses the API may answer (each must also be documented).
    expect: frozenset[int]
    path_parameters: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    body: Any = None
    media_type: str | None = None


OWN = "{own}"
JSON = "application/json"


def task_post(expect: set[int], body: Any) -> Hostile:
    """A task posted as a JSON body (a dict, or raw JSON text)."""
    return Hostile("/api/tasks", "POST", frozenset(expect), body=body)


def task_upload(
    expect: set[int], query: dict[str, str], body: bytes = b"1\n", media_type: str = "application/x-ndjson"
) -> Hostile:
    """A task posted as a file of items, its options in the query."""
    return Hostile("/api/tasks", "POST", frozenset(expect), query=query, body=body, media_type=media_type)


def own_task_patch(expect: set[int], body: Any) -> Hostile:
    """A change to a task of the test's own tenant."""
    return Hostile("/api/tasks/{task_id}", "PATCH", frozenset(expect), {"task_id": OWN}, body=body)


HOSTILE = {
    # NUL (U+0000): PostgreSQL text and jsonb cannot hold it.
    "task-id-nul": Hostile("/api/tasks/{task_id}", "GET", frozenset({404}), {"task_id": "a\x00b"}),
    "events-id-nul": Hostile("/api/tasks/{task_id}/events", "GET", frozenset({404}), {"task_id": "a\x00b"}),
    "cancel-id-nul": Hostile("/api/tasks/{task_id}/cancel", "POST", frozenset({404}), {"task_id": "a\x00b"}),
    "retry-id-nul": Hostile("/api/tasks/{task_id}/retry", "POST", frozenset({404}), {"task_id": "a\x00b"}),
    "pause-id-nul": Hostile("/api/tasks/{task_id}/pause", "POST", frozenset({404}), {"task_id": "a\x00b"}),
    "resume-id-nul": Hostile("/api/tasks/{task_id}/resume", "POST", frozenset({404}), {"task_id": "a\x00b"}),
    "patch-id-nul": Hostile(
        "/api/tasks/{task_id}", "PATCH", frozenset({404}), {"task_id": "a\x00b"}, body={"parallel": 2}
    ),
    "stream-id-nul": Hostile("/api/tasks/{task_id}/stream", "GET", frozenset({404}), {"task_id": "a\x00b"}),
    "tasks-cursor-nul": Hostile(
        "/api/tasks",
        "GET",
        frozenset({200, 422}),
        query={"before": _b64("2026-01-01T00:00:00+00:00|a\x00")},
    ),
    "items-nul": task_post({202, 422}, {"job": "echo", "items": ["a\x00b"]}),
    "meta-nul": task_post({202, 422}, {"job": "echo", "items": [1], "meta": {"\x00": "\x00"}}),
    "csv-nul": task_upload({202, 400, 422}, {"job": "echo"}, b"a,b\n\x00,1\n", media_type="text/csv"),
    "ndjson-nul": task_upload({202, 400, 422}, {"job": "echo"}, b'"a\\u0000"\n'),
    "ndjson-lone-surrogate": task_upload({422}, {"job": "echo"}, b'{"a": "\\udbff"}\n'),
    "concurrency-key-lone-surrogate": task_post(
        {422}, '{"job": "echo", "items": [1], "concurrency_key": "k\\ud800"}'
    ),
    "stop-jid-nul": Hostile("/api/jobs/{jid}/stop", "POST", frozenset({404}), {"jid": "a\x00b"}),
    "resume-jid-overlong": Hostile(
        "/api/jobs/{jid}/resume", "POST", frozenset({404}), {"jid": "j" * 100_000}
    ),
    # Strings far longer than anything shown: stored as given, shown cut.
    "items-overlong-string": task_post({202}, {"job": "echo", "items": ["x" * 200_000]}),
    "meta-overlong-string": task_post(
        {202, 413, 422}, {"job": "echo", "items": [1], "meta": {"a": "m" * 200_000}}
    ),
    "csv-overlong-cell": task_upload(
        {202, 400, 413, 422}, {"job": "echo"}, b"a,b\n" + b"L" * 200_000 + b",1\n", media_type="text/csv"
    ),
    "queue-nul": task_post({422}, {"job": "echo", "items": [1], "queue": "q\x00"}),
    "job-nul": task_post({422}, {"job": "echo\x00", "items": [1]}),
    "queue-name-nul": Hostile("/api/queues/{name}/pause", "POST", frozenset({422}), {"name": "q\x00"}),
    "queue-name-control": Hostile("/api/queues/{name}/resume", "POST", frozenset({422}), {"name": "\x1b[2J"}),
    "queue-name-long": Hostile("/api/queues/{name}/clear", "POST", frozenset({422}), {"name": "q" * 256}),
    # Numbers at and over the edges.
    "events-cursor-max": Hostile(
        "/api/tasks/{task_id}/events", "GET", frozenset({200}), {"task_id": OWN}, {"after": str(2**63 - 1)}
    ),
    "events-cursor-overflow": Hostile(
        "/api/tasks/{task_id}/events",
        "GET",
        frozenset({422}),
        {"task_id": OWN},
        {"after": str(2**63)},
    ),
    "limit-huge": Hostile("/api/tasks", "GET", frozenset({422}), query={"limit": "9" * 40}),
    "errors-huge": Hostile(
        "/api/tasks/{task_id}", "GET", frozenset({422}), {"task_id": OWN}, {"errors": "9" * 40}
    ),
    "items-huge-numbers": task_post({202}, {"job": "echo", "items": [10**40, -(10**40), 1e308, -1e-308]}),
    "chunk-size-huge": task_post({422}, {"job": "echo", "items": [1], "chunk_size": 10**40}),
    "chunk-size-integral-float": task_post({202}, {"job": "echo", "items": [1], "chunk_size": 2.0}),
    # Numbers no database stores: NaN and infinities (Python's JSON reads them; JSON has none).
    "items-nan": task_post({422}, '{"job": "echo", "items": [NaN]}'),
    "items-infinity": task_post({422}, '{"job": "echo", "items": [-Infinity]}'),
    "items-overflow": task_post({422}, '{"job": "echo", "items": [1e999]}'),
    "meta-nan": task_post({422}, '{"job": "echo", "items": [1], "meta": {"a": NaN}}'),
    "ndjson-overflow": task_upload({422}, {"job": "echo"}, b"[1e999]\n"),
    "query-meta-nan": task_upload({422}, {"job": "echo", "meta": '{"a": Infinity}'}),
    # Text that is not what it says.
    "lone-surrogate": task_post({422}, '{"job": "echo", "items": ["\\ud800"]}'),
    "meta-lone-surrogate": task_post({422}, '{"job": "echo", "items": [1], "meta": {"a": "\\udfff"}}'),
    "query-meta-lone-surrogate": task_upload({422}, {"job": "echo", "meta": '{"a": "\\ud800"}'}),
    # One level deeper than the limit (the body is level 1).
    "deep-json": task_post(
        {422}, '{"job": "echo", "items": [' + "[" * LIMITS.max_json_depth + "]" * LIMITS.max_json_depth + "]}"
    ),
    "query-meta-deep": task_upload(
        {422},
        {
            "job": "echo",
            "meta": '{"a": ' + "[" * LIMITS.max_json_depth + "]" * LIMITS.max_json_depth + "}",
        },
    ),
    # Feed settings at and over their edges, and numbers no setting can be.
    "parallel-max": task_post({202}, {"job": "echo", "items": [1], "parallel": 1_000_000}),
    "parallel-integral-float": task_post({202}, {"job": "echo", "items": [1], "parallel": 2.0}),
    "parallel-huge": task_post({422}, {"job": "echo", "items": [1], "parallel": 10**40}),
    "interval-overflow": task_post({422}, '{"job": "echo", "items": [1], "parallel": 1, "interval": 1e999}'),
    "query-interval-infinity": task_upload({422}, {"job": "echo", "parallel": "1", "interval": "Infinity"}),
    "query-parallel-other-digits": task_upload({422}, {"job": "echo", "parallel": "\u0663"}),
    "patch-priority-huge": own_task_patch({422}, {"priority": 2**63}),
    "patch-interval-nan": own_task_patch({422}, '{"interval": NaN}'),
    "patch-deep": own_task_patch(
        {422}, '{"parallel": ' + "[" * LIMITS.max_json_depth + "]" * LIMITS.max_json_depth + "}"
    ),
    "cursor-not-base64": Hostile("/api/tasks", "GET", frozenset({422}), query={"before": "%%%"}),
    "cursor-base64-garbage": Hostile("/api/tasks", "GET", frozenset({422}), query={"before": _b64("\xff|x")}),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_requests(
    fuzz_api: Api, database_url: str, name: str, request: pytest.FixtureRequest
) -> None:
    """Requests with values no generator aims at get a documented answer, never a 5xx."""
    hostile = HOSTILE[name]
    existing = _create_tasks(fuzz_api)
    schema = _schema(fuzz_api, None)
    operation = schema[hostile.path][hostile.method]
    path_parameters = {k: existing.task_ids[0] if v == OWN else v for k, v in hostile.path_parameters.items()}
    body = hostile.body
    media_type = hostile.media_type
    if isinstance(body, str):
        # Raw JSON text (what json.dumps would not write): sent as bytes.
        body, media_type = body.encode(), media_type or JSON
    case = operation.Case(
        path_parameters=path_parameters,
        query=hostile.query,
        headers={"Authorization": f"Bearer {fuzz_api.acme}"},
        **({"body": body, "media_type": media_type or JSON} if body is not None else {}),
    )
    response = case.call_and_validate()
    assert response.status_code in hostile.expect, response.text
