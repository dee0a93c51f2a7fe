"""RESULTS.md: a header (the command, the raw data files, the machine list), then ``## `` sections.

``start`` writes the header; each section then adds its own ``## `` section and JSON file
(``write_section``), in the order the command line calls them. A run of some sections only
keeps the others from the previous RESULTS.md (``keep_earlier``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

TITLE = (
    "# AsyncTask benchmarks: against Sidekiq 6.4, Celery, RQ, Dramatiq, arq and Huey; "
    "tracking, HTTP API, SQL queue"
)
MACHINE = "Machine and versions"
#: Sections that continue the one before them (the runtime section's): a note on a separate
#: run goes on the first one only.
_CONTINUED = ("Method", "Configuration")
_RAW_DATA = re.compile(r"Raw data: (.*?) ?beside this file\.")
_PRODUCED_BY = re.compile(r"Produced by `(.*?)`")
_MACHINE_LINE = re.compile(r"^- (.*?): (.*)$", re.MULTILINE)


def header(command: str, machine: dict[str, str]) -> str:
    """The title, the command that produced the run, an empty list of raw data files (each
    section adds its own), and the machine list."""
    return "\n".join(
        [
            TITLE,
            "",
            f"Produced by `{command}` from the repository root. Raw data: beside this file.",
            "",
            f"## {MACHINE}",
            "",
            *(f"- {key}: {value}" for key, value in machine.items()),
            "",
        ]
    )


def start(out_dir: Path, command: str, machine: dict[str, str]) -> None:
    """A new RESULTS.md in ``out_dir`` holding only the header."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "RESULTS.md").write_text(header(command, machine), encoding="utf-8")


def section(title: str, lines: Sequence[str]) -> str:
    """``lines`` under the heading ``## title``."""
    return "\n".join([f"## {title}", "", *lines, ""])


def _split(document: str) -> tuple[str, dict[str, str]]:
    """The text before the first ``## `` heading, and each ``## `` section by its title."""
    parts = re.split(r"^(?=## )", document, flags=re.MULTILINE)
    sections = {part.split("\n", 1)[0].removeprefix("## ").strip(): part for part in parts[1:]}
    return parts[0], sections


def _join(preamble: str, sections: dict[str, str]) -> str:
    texts = [preamble.rstrip("\n")] + [text.strip("\n") for text in sections.values()]
    return "\n\n".join(t for t in texts if t) + "\n"


def _raw_files(preamble: str) -> list[str]:
    match = _RAW_DATA.search(preamble)
    return [f for f in match.group(1).split(", ") if f] if match else []


def _with_raw_files(preamble: str, files: list[str]) -> str:
    line = f"Raw data: {', '.join(dict.fromkeys(files))} beside this file."
    return _RAW_DATA.sub(lambda _: line, preamble, count=1)


def with_section(
    document: str, title: str, section: str, files: Sequence[str] = (), *, first: bool = False
) -> str:
    """``document`` with ``section`` (headed ``## title``) replacing the one of that title, or
    added (at the end, or right after the machine list when ``first``), and ``files`` among
    the files of its "Raw data" line."""
    preamble, sections = _split(document)
    if files:
        preamble = _with_raw_files(preamble, [*_raw_files(preamble), *(f"`{name}`" for name in files)])
    if first and title not in sections:
        ordered = {MACHINE: sections.pop(MACHINE)} if MACHINE in sections else {}
        sections = {**ordered, title: section, **sections}
    sections[title] = section
    return _join(preamble, sections)


class DrainResults(Protocol):
    """What the drain sections (flow, feeds, fair, periodic) record of a run besides its runs."""

    settings: dict[str, Any]
    versions: dict[str, str]
    databases: dict[str, str]
    seconds: dict[str, float]

    def errors(self) -> list[str]: ...


def drain_markdown(
    section: str, topic: str, tables: str, method: str, versions: Mapping[str, str], notes: Sequence[str] = ()
) -> str:
    """A drain section: its tables, its method (then ``notes``), and the versions it ran with."""
    listed = [f"- {name}: {value}" for name, value in versions.items()]
    lines = [f"## {section}", "", tables, f"### Method ({topic})", "", method, *notes]
    return "\n".join([*lines, f"#### Versions ({topic})", "", *listed, ""])


def drain_raw(
    results: DrainResults, machine: dict[str, str], runs: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    """A drain section's JSON: the run's settings, machine, versions and timings, ``extra``,
    its runs and its errors."""
    return {
        "settings": results.settings,
        "machine": machine,
        "versions": results.versions,
        "databases": results.databases,
        "seconds": results.seconds,
        **extra,
        "runs": runs,
        "errors": results.errors(),
    }


def section_raw(results: DrainResults, machine: dict[str, str], **parts: Any) -> dict[str, Any]:
    """The JSON of a section with runs of several kinds (``parts``): the run's settings,
    machine, databases, versions and timings, those runs, and its errors."""
    return {
        "settings": results.settings,
        "machine": machine,
        "databases": results.databases,
        "versions": results.versions,
        "seconds": results.seconds,
        **parts,
        "errors": results.errors(),
    }


def write_section(
    out_dir: Path,
    title: str,
    section: str,
    json_file: str = "",
    data: Any = None,
    *,
    also: Sequence[str] = (),
    first: bool = False,
) -> None:
    """``data`` into ``json_file`` (if any), and ``section`` into the RESULTS.md of ``out_dir``
    (see ``with_section``), with ``json_file`` and ``also`` (other files the section wrote)
    listed as its raw data."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if json_file:
        (out_dir / json_file).write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    files = [json_file, *also] if json_file else list(also)
    results_md = out_dir / "RESULTS.md"
    document = results_md.read_text(encoding="utf-8") if results_md.exists() else ""
    results_md.write_text(with_section(document, title, section, files, first=first), encoding="utf-8")


def keep_earlier(previous: str, fresh: str) -> str:
    """``fresh`` (this run's RESULTS.md) with the sections it lacks from ``previous``.

    When ``fresh`` has every section ``previous`` has, it is returned as is. Otherwise the
    result is ``previous`` (its header and machine list, which belong to its sections) with
    this run's sections in place of the old ones, each headed by the command that produced it
    and the machine lines that differ from ``previous``'s list.
    """
    old_preamble, old = _split(previous)
    new_preamble, new = _split(fresh)
    if set(old) <= set(new):
        return fresh
    command = _PRODUCED_BY.search(new_preamble)
    old_machine = dict(_MACHINE_LINE.findall(old.get(MACHINE, "")))
    changed = [
        f"- {key}: {value}"
        for key, value in _MACHINE_LINE.findall(new.get(MACHINE, ""))
        if old_machine.get(key) != value
    ]
    run = command.group(1) if command else "python -m bench"
    note = (
        f"This section comes from a separate run, `{run}`; the other sections and the machine "
        "list above are from the earlier run. This run's machine and versions, where they differ "
        "from that list:\n\n" + ("\n".join(changed) or "- none")
    )
    for title, text in new.items():
        if title == MACHINE:
            continue
        if title not in _CONTINUED:
            heading, body = text.split("\n", 1)
            text = f"{heading}\n\n{note}\n\n{body.lstrip(chr(10))}"
        old[title] = text
    preamble = _with_raw_files(old_preamble, [*_raw_files(old_preamble), *_raw_files(new_preamble)])
    return _join(preamble, old)
