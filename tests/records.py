"""Reading the record files that job subprocesses append to while a test reads them."""

from __future__ import annotations

from pathlib import Path


def written_lines(path: Path) -> list[str]:
    """The file's whole lines, or none if it does not exist yet.

    A writer appends each line in one ``write``, but a reader may see the first bytes of a
    write before the rest: the text after the last newline is a line still being written.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return text[: text.rfind("\n") + 1].splitlines()
