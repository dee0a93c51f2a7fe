"""The mutation runs' settings name modules and tests that exist: a module moved or renamed
would otherwise fail only when someone next runs ``python -m tests.mutation`` on it."""

from __future__ import annotations

from tests.mutation import ROOT, mutation_settings


def test_every_module_listed_for_mutation_exists() -> None:
    modules = mutation_settings()["tests"]
    assert modules
    assert [module for module in modules if not (ROOT / module).is_file()] == []


def test_every_test_listed_for_a_module_exists() -> None:
    listed = {test for tests in mutation_settings()["tests"].values() for test in tests}
    missing = []
    for test in sorted(listed):
        path, _, name = test.partition("::")
        file = ROOT / path
        if not file.is_file() or (name and f"def {name}(" not in file.read_text()):
            missing.append(test)
    assert missing == []
