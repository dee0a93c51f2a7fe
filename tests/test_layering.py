"""Package dependencies point one way: every import of every module of asynctask and webapi,
read from the source, follows the table of allowed directions below, and no two parts of
asynctask import each other, directly or through others.

Every import counts, at module level or inside a function (an import deferred to keep a
process small is still a dependency). Imports under ``if TYPE_CHECKING:`` count too: none is
needed against the table, so none is exempt.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The part of the code each module belongs to: the longest matching prefix wins.
PARTS = {
    "asynctask": "asynctask",  # the package itself: its public names, re-exported
    # Foundations: no I/O beyond what each names, used by everything.
    "asynctask.errors": "core",
    "asynctask.settings": "core",
    "asynctask.keys": "core",
    "asynctask.payload": "core",
    # What text every store can hold: checked by callers' data, applied by tracking.
    "asynctask.storable": "core",
    "asynctask.log": "core",
    "asynctask.supervision": "core",
    "asynctask.modules": "core",
    # Flow-control options and the payload keys they write: checked by payload decoding.
    "asynctask.flow": "core",
    "asynctask.feeds": "core",
    # Which share of a fair queue a task's jobs wait in: named by tasks, honoured by brokers.
    "asynctask.fairness": "core",
    # Engines, migrations and the declarative base, shared by tracking and the SQL broker.
    "asynctask.db": "db",
    "asynctask.tracking": "tracking",
    "asynctask.brokers": "brokers",
    "asynctask.context": "context",
    "asynctask.middleware": "middleware",
    # What a job is, the registry of them, the clients that push them and the definitions that
    # push themselves through the default client: one part, as Dramatiq's actor and broker are.
    "asynctask.job_spec": "client",
    "asynctask.job": "client",
    "asynctask.registry": "client",
    "asynctask.client": "client",
    "asynctask.async_client": "client",
    # Schedules name registered jobs, as definitions do: declared beside them.
    "asynctask.periodic": "client",
    "asynctask.tasks": "tasks",
    "asynctask.tokens": "tokens",
    "asynctask.api": "api",
    "asynctask.worker": "worker",
    "asynctask.demo": "demo",
    # Tracking attached to other runtimes (Celery, RQ, Dramatiq): optional, never imported by the rest.
    "asynctask.integrations": "integrations",
    "asynctask.cli": "cli",
    "asynctask.__main__": "cli",
    "webapi": "webapi",
}

LIBRARY = {"core", "db", "tracking", "brokers", "context", "middleware", "client", "tasks", "tokens", "api"}

#: What each part may import besides itself. Tracking defines the store it needs
#: (``tracking.store``) and the brokers implement it, so brokers depend on tracking and never
#: the reverse; each broker implements the read API's port beside itself (``brokers.reads``).
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "db": {"core"},
    "tracking": {"core", "db"},
    "brokers": {"core", "db", "tracking"},
    "context": {"core", "tracking"},
    "middleware": {"core", "tracking", "context"},
    "client": {"core", "brokers", "middleware", "tracking"},
    # Stopping a job finds it in the queues and job sets, and moves it, through the read model.
    # A task sent through another runtime is staged behind the brokers' own staging port.
    "tasks": {"core", "db", "tracking", "middleware", "client", "api", "brokers"},
    "tokens": {"core", "db", "tracking"},
    "api": {"core", "db", "brokers", "client"},
    # The heartbeat reports the package's ``__version__``. A job adds work to its task through
    # the task code, loaded at the first such call.
    "worker": {"core", "brokers", "tracking", "context", "middleware", "client", "tasks", "asynctask"},
    "asynctask": {"core", "context", "middleware", "client", "tracking", "tasks"},
    "integrations": LIBRARY | {"asynctask"},
    "cli": LIBRARY | {"asynctask", "worker", "demo"},
    "demo": LIBRARY | {"asynctask"},
    # webapi.cli implements ``asynctask api`` with the command line's shared failure handling.
    "webapi": LIBRARY | {"asynctask", "cli"},
}


def modules() -> dict[str, Path]:
    found = {}
    for package in ("asynctask", "webapi"):
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """Every asynctask or webapi module ``module`` imports, with the line: ``from p import m``
    names module ``p.m`` when that is a module, else ``p``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] in ("asynctask", "webapi"):
                yield target, node.lineno


def part(module: str) -> str:
    prefixes = [p for p in PARTS if module == p or module.startswith(p + ".")]
    assert prefixes, f"{module} belongs to no part: add it to PARTS"
    return PARTS[max(prefixes, key=len)]


def edges() -> dict[tuple[str, str], list[str]]:
    known = modules()
    found: dict[tuple[str, str], list[str]] = {}
    for module, path in sorted(known.items()):
        for target, line in imported(module, path, known):
            source, destination = part(module), part(target)
            if source != destination:
                where = f"{path.relative_to(ROOT)}:{line} imports {target}"
                places = found.setdefault((source, destination), [])
                if where not in places:
                    places.append(where)
    return found


def test_every_import_follows_the_allowed_directions() -> None:
    against = [
        f"{source} -> {destination}: {where}"
        for (source, destination), places in edges().items()
        if destination not in ALLOWED[source]
        for where in places
    ]
    assert not against, "imports against the allowed directions:\n" + "\n".join(against)


def test_no_cycle_between_the_parts_of_asynctask() -> None:
    graph: dict[str, set[str]] = {}
    for source, destination in edges():
        graph.setdefault(source, set()).add(destination)
    cycles = []
    for start in graph:
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    cycles.append(" -> ".join([*trail, start]))
                elif nxt not in trail:
                    stack.append((nxt, [*trail, nxt]))
    assert not cycles, "parts importing each other:\n" + "\n".join(sorted(set(cycles)))


def test_no_cycle_between_modules() -> None:
    """Within a part too, two modules never import each other, directly or through others: a
    circle held together by an import deferred into a function is still one."""
    known = modules()
    graph = {
        module: {target for target, _ in imported(module, path, known) if target in known}
        for module, path in known.items()
    }
    circles = [sorted(component) for component in _strongly_connected(graph) if len(component) > 1]
    assert not circles, "modules importing each other:\n" + "\n".join(" <-> ".join(c) for c in circles)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components of ``graph``, iteratively (the import chains are deeper than a
    recursion limit would like)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    components.append(component)
    return components


def test_the_table_itself_has_no_cycle() -> None:
    """A cycle allowed in the table could appear in the code without the test noticing."""
    order: list[str] = []
    remaining = {part: allowed & set(ALLOWED) for part, allowed in ALLOWED.items()}
    while remaining:
        ready = sorted(p for p, needs in remaining.items() if needs <= set(order))
        assert ready, f"the table allows a cycle among {sorted(remaining)}"
        order += ready
        for p in ready:
            del remaining[p]


def test_the_library_never_imports_the_web_app() -> None:
    assert all("webapi" not in ALLOWED[p] for p in ALLOWED if p != "webapi")


#: Other runtimes' packages, by the module of ``asynctask.integrations`` that alone may import them.
RUNTIMES = {"celery": {"celery", "kombu", "billiard"}, "rq": {"rq"}, "dramatiq": {"dramatiq", "pika"}}


def test_only_the_integrations_import_other_runtimes() -> None:
    against = []
    for module, path in sorted(modules().items()):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                owners = [runtime for runtime, packages in RUNTIMES.items() if top in packages]
                if owners and not module.startswith(f"asynctask.integrations.{owners[0]}"):
                    against.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert not against, "other runtimes imported outside their integration:\n" + "\n".join(against)
