"""The shape shared by every real-tool source: fetch the tool's output (I/O), then parse it (pure).

``parse_saved`` turns a saved output (a file, or a folder for sysfs) into messages; it is what
``fabricwatch parse`` runs and what the golden tests check. ``scrape`` fetches the same text live
(running the tool, or GET-ing a URL) and hands it to the same parser, or re-reads ``--file`` when the
output is produced by something else. Options common to all sources (``--host``, ``--port-map``,
``--timeout``, ``--file``) are added by the ``collect`` and ``parse`` commands; a source adds its own
as fields of its ``Config`` (a :class:`ToolConfig`), read typed as ``opts.config.<field>``.
"""

from __future__ import annotations

import socket
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, ClassVar

import msgspec

from fabricwatch.collectors import fetch, portmap
from fabricwatch.collectors.base import Source, SourceConfig
from fabricwatch.collectors.portmap import PortMap
from fabricwatch.schema import Message

DEFAULT_TIMEOUT_S = 10.0


class ToolConfig(SourceConfig):
    """What every tool source is told: whose data it is, how to name ports, how long a tool may take."""

    host: str | None = None  # the host (or switch) the data is from; None: this machine's hostname
    port_map: Path | None = None  # YAML interface → port id map (collectors/portmap.py)
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] = DEFAULT_TIMEOUT_S  # seconds a tool may take
    file: Path | None = None  # re-read this saved output instead of running the tool


@dataclass(frozen=True)
class Options:
    """A tool source's runtime settings: its config with the host resolved and the port map read."""

    host: str
    port_map: PortMap = field(default_factory=PortMap)
    timeout_s: float = DEFAULT_TIMEOUT_S
    file: Path | None = None
    host_given: bool = False  # the host was named (not this machine's hostname)
    config: ToolConfig = field(default_factory=ToolConfig)  # the source's own typed options

    @classmethod
    def from_config(cls, config: ToolConfig) -> Options:
        """Built once at start-up; the port map file is read (and checked) here, not per scrape."""
        return cls(
            host=config.host or socket.gethostname(),
            port_map=portmap.load(config.port_map),
            timeout_s=config.timeout_s,
            file=config.file,
            host_given=bool(config.host),
            config=config,
        )


class ToolSource(Source):
    """A source made of a pure parser and the I/O that feeds it."""

    name: ClassVar[str]
    Config: ClassVar[type[ToolConfig]] = ToolConfig
    #: what ``fabricwatch parse --source NAME PATH`` expects PATH to be (shown in --help)
    saved_input: ClassVar[str] = "a saved tool output"

    def __init__(self, opts: Options) -> None:
        self.opts = opts

    @classmethod
    def build(cls, config: SourceConfig) -> ToolSource:
        if not isinstance(config, cls.Config):
            raise TypeError(f"{cls.name} takes a {cls.__name__}.Config, not {type(config).__name__}")
        return cls(Options.from_config(config))

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
