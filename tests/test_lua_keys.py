"""Every key name the Lua scripts build is one ``asynctask.keys.Keys`` gives, under the namespace.

The scripts build flow control's, feeds' and fair share's keys from payloads (their names cannot
all be declared in KEYS), so their names are spelled a second time in Lua: this reads every name
they build and holds it against the key module, whose methods are called with a marker argument
to find what comes before it.
"""

from __future__ import annotations

import inspect
import re
from importlib import resources

from asynctask.keys import Keys

#: Stands for a method's argument in the names it builds.
MARK = "\x00"
#: Where a script builds a key name: the namespace prefix, then a literal.
PREFIXED = re.compile(r'FLOW_PREFIX \.\. "([^"]*)"')
#: A name kept in a variable, completed where it is used.
KEPT = re.compile(r'local (\w+) = FLOW_PREFIX \.\. "([^"]*)"\s*$', re.MULTILINE)
#: The fair-share keys of a queue, by kind (``fair_key`` in fair_share.lua).
FAIR_KIND = re.compile(r'fair_key\("(\w+)"')
#: A literal that names a key of ours anywhere in a script.
OURS = re.compile(r'"(asynctask:[^"]*)"')


def _scripts() -> dict[str, str]:
    """Each script's code, its comments left out."""
    folder = resources.files("asynctask.brokers.redis").joinpath("lua")
    return {
        entry.name: re.sub(r"--.*$", "", entry.read_text(encoding="utf-8"), flags=re.MULTILINE)
        for entry in folder.iterdir()
        if entry.name.endswith(".lua")
    }


def _names() -> tuple[set[str], set[str]]:
    """The key module's whole names, and the beginnings of its names built from an argument."""
    keys = Keys("")
    whole = {value for value in vars(keys).values() if isinstance(value, str) and value}
    stems = set()
    for name, method in inspect.getmembers(keys, inspect.ismethod):
        parameters = inspect.signature(method).parameters.values()
        if not name.startswith("_") and all(parameter.annotation == "str" for parameter in parameters):
            stems.add(method(*[MARK] * len(parameters)).split(MARK)[0])
    return whole, stems - {""}


def _built(code: str) -> set[str]:
    """The names (or beginnings of names) a script builds."""
    built: set[str] = set()
    kept = dict(KEPT.findall(code))
    for literal in PREFIXED.findall(code):
        if literal == "asynctask:":
            built |= {f"asynctask:{kind}|" for kind in FAIR_KIND.findall(code)}
        elif literal in kept.values():
            variable = next(name for name, value in kept.items() if value == literal)
            uses = re.findall(rf'\b{variable} \.\. "([^"]*)"', code)
            built |= {literal + suffix for suffix in uses} if uses else {literal}
        else:
            built.add(literal)
    return built


def _known(name: str, whole: set[str], stems: set[str]) -> bool:
    return name in whole or any(name.startswith(stem) and stem.endswith((":", "|")) for stem in stems)


def test_every_key_name_a_script_builds_is_the_key_module_s() -> None:
    whole, stems = _names()
    unknown = {
        (script, name)
        for script, code in _scripts().items()
        for name in _built(code)
        if not _known(name, whole, stems)
    }
    assert unknown == set()


def test_every_key_of_ours_a_script_names_carries_the_namespace() -> None:
    for script, code in _scripts().items():
        for match in OURS.finditer(code):
            before = code[: match.start()].rstrip()
            assert before.endswith("FLOW_PREFIX .."), f"{script}: {match.group(1)} without the namespace"


def test_the_names_read_cover_the_scripts_key_families() -> None:
    """The reading above finds what it must: a name of each way of building one."""
    built = set().union(*(_built(code) for code in _scripts().values()))
    assert {"asynctask:lanes", "asynctask:lane:", "asynctask:shares|", "queue:"} <= built
    assert {"asynctask:feed:", "asynctask:feed-held:", "asynctask:periodic:last"} <= built
