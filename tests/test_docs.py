"""The documentation holds together: its links resolve, the README stays a front page, and the
reference names every setting, command, option and error code the code has."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from pathlib import Path

import pytest

from asynctask.cli.parser import build_parser
from asynctask.settings import Settings
from webapi.config import ApiConfig

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "bench" / "README.md", *DOCS.rglob("*.md")])
#: The README is the front page; the rest of the documentation lives in docs/.
README_MAX_LINES = 200

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.M)


def _prose(path: Path) -> str:
    """The page without its code blocks and code spans, where brackets are code, not links."""
    return _CODE.sub("", _FENCE.sub("", path.read_text()))


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text())):
        slug = base = _slug(heading)
        count = 0
        while slug in anchors:
            count += 1
            slug = f"{base}-{count}"
        anchors.add(slug)
    return anchors


def _relative_links(path: Path) -> list[str]:
    return [t for t in _LINK.findall(_prose(path)) if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def test_the_pages_exist() -> None:
    assert (ROOT / "CHANGELOG.md").is_file()
    assert len(PAGES) > 10, PAGES


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _relative_links(page):
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_the_links_reach_the_docs() -> None:
    """The README links into every page of docs/, and the index does too."""
    for index in (ROOT / "README.md", DOCS / "README.md"):
        linked = {(index.parent / t.partition("#")[0]).resolve() for t in _relative_links(index)}
        unlinked = [p for p in DOCS.rglob("*.md") if p != index and p.resolve() not in linked]
        assert not unlinked, f"{index.relative_to(ROOT)} does not link {unlinked}"


def test_the_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines < README_MAX_LINES


def test_every_setting_is_in_the_reference() -> None:
    text = (DOCS / "reference" / "settings.md").read_text()
    names = {f.name for f in fields(Settings)} | {f.name for f in fields(ApiConfig)} - {"settings"}
    missing = sorted(name for name in names if f"`{name}`" not in text)
    assert not missing


def _commands(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, f"{path} {name}")
    return found


def test_every_command_and_option_is_in_the_reference() -> None:
    text = (DOCS / "reference" / "cli.md").read_text()
    missing = []
    for path, parser in _commands(build_parser(), "asynctask"):
        if path not in text:
            missing.append(path)
        for action in parser._actions:
            missing += [f"{path} {o}" for o in action.option_strings if o not in text and o != "--help"]
    assert not missing


def test_every_error_code_is_in_the_reference() -> None:
    text = (DOCS / "reference" / "http-errors.md").read_text()
    source = "\n".join(p.read_text() for p in (ROOT / "webapi").rglob("*.py"))
    codes = set(re.findall(r"\b[1-5]\d\d,\s*\"([a-z_]+)\"", source))
    codes |= set(re.findall(r"\b[1-5]\d\d:\s*\"([a-z_]+)\"", source))
    assert {"unauthorized", "validation_failed", "too_many_streams", "internal_error"} <= codes
    missing = sorted(code for code in codes if f"`{code}`" not in text)
    assert not missing


def test_the_clients_thread_safety_is_in_the_guide_not_only_in_its_docstring() -> None:
    """Whether threads may share a client is asked before reading any source: the jobs guide says
    so, with the pool size that many threads need (tests/brokers/test_jobs.py checks that they may)."""
    guide = (DOCS / "guide" / "jobs.md").read_text()
    section = guide.partition("### Threads and processes\n")[2].partition("\n## ")[0]
    assert "A `Client` is thread-safe" in section
    assert "concurrency" in section
