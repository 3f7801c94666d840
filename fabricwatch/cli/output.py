"""Where command results are printed: tables at the terminal's width on a terminal, and never cut to
80 columns when the output is a pipe or a file (``fabricwatch demo | cat``, ``| grep``, ``> out.txt``),
where rich would otherwise assume 80 columns and truncate every column of a wide table."""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

UNBOUNDED = 10_000  # wider than any table we print: rows come out whole, one line each


def console(file: IO[str] | None = None) -> Console:
    """A rich Console for results on ``file`` (stdout by default)."""
    from rich.console import Console  # imported on use: `fabricwatch --help` stays quick

    stream = file if file is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return Console(file=stream)
    return Console(file=stream, width=UNBOUNDED)
