"""The shape shared by every real-tool source: fetch the tool's output (I/O), then parse it (pure).

``parse_saved`` turns a saved output (a file, or a folder for sysfs) into messages; it is what
``fabricwatch parse`` runs and what the golden tests check. ``scrape`` fetches the same text live
(running the tool, or GET-ing a URL) and hands it to the same parser, or re-reads ``--file`` when the
output is produced by something else. Options common to all sources (``--host``, ``--port-map``,
``--timeout``, ``--file``) are added by the ``collect`` and ``parse`` commands; a source adds its own.
"""

from __future__ import annotations

import argparse
import socket
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from fabricwatch.collectors import fetch, portmap
from fabricwatch.collectors.base import Source
from fabricwatch.collectors.portmap import PortMap
from fabricwatch.schema import Message

DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Options:
    """What every source is told: whose data it is, how to name ports, how long a tool may take."""

    host: str
    port_map: PortMap = field(default_factory=PortMap)
    timeout_s: float = DEFAULT_TIMEOUT_S
    file: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # the source's own options

    def get(self, name: str, default: Any = None) -> Any:
        value = self.extra.get(name)
        return default if value is None else value

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        """Built once at start-up; the port map file is read (and checked) here, not per scrape."""
        common = {"host", "port_map", "timeout", "file"}
        extra = {k: v for k, v in vars(args).items() if k not in common}
        extra["host_given"] = bool(getattr(args, "host", None))
        return cls(
            host=getattr(args, "host", None) or socket.gethostname(),
            port_map=portmap.load(getattr(args, "port_map", None)),
            timeout_s=getattr(args, "timeout", None) or DEFAULT_TIMEOUT_S,
            file=getattr(args, "file", None),
            extra=extra,
        )


class ToolSource(Source):
    """A source made of a pure parser and the I/O that feeds it."""

    name: ClassVar[str]
    #: what ``fabricwatch parse --source NAME PATH`` expects PATH to be (shown in --help)
    saved_input: ClassVar[str] = "a saved tool output"

    def __init__(self, opts: Options) -> None:
        self.opts = opts

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ToolSource:
        return cls(Options.from_args(args))

    @classmethod
    @abstractmethod
    def parse_saved(cls, path: Path, opts: Options, ts: float) -> list[Message]:
        """Messages from a saved output; raises InputError naming the source and file when unparseable."""

    @abstractmethod
    def scrape_live(self, now: float) -> list[Message]:
        """Fetch the output from the live system and parse it."""

    def scrape(self, now: float) -> list[Message]:
        if self.opts.file is not None:
            return self.parse_saved(self.opts.file, self.opts, now)
        return self.scrape_live(now)

    def place(self, what: str = "") -> str:
        """``nvidia-smi`` or ``ethtool eth2``: how errors name this source."""
        return f"{self.name} {what}".strip()


def read_saved(path: Path, source: str) -> str:
    return fetch.read_text(path, f"{source} {path}")
