"""The source interface and its registry.

A source is one kind of telemetry origin (the simulator, NVML, a saved tool output, a switch). It
is registered by name; the name is its ``--source`` value. Sources are imported lazily so that a host
without, say, the NVIDIA bindings can still run every other source.

Config and runtime are separate (STYLE item 2): each source declares a frozen ``Config`` (unknown
keys rejected) and :meth:`Source.build` turns a checked config into the running source. The CLI only
converts its arguments into that config (fabricwatch/cli/collect.py ``config_from_args``).
"""

from __future__ import annotations

import argparse
import importlib
from abc import ABC, abstractmethod
from typing import ClassVar

from fabricwatch.errors import InputError
from fabricwatch.schema import Message
from fabricwatch.yamlconf import Config

# name -> "module:Class"; a source's module defines the class and nothing registers at import time.
SOURCES: dict[str, str] = {
    "sim": "fabricwatch.collectors.sim.source:SimSource",
    "nvml": "fabricwatch.collectors.nvml:NvmlSource",
    "nvidia-smi": "fabricwatch.collectors.nvidia_smi:NvidiaSmiSource",
    "dcgm": "fabricwatch.collectors.dcgm:DcgmSource",
    "ethtool": "fabricwatch.collectors.ethtool:EthtoolSource",
    "sysfs": "fabricwatch.collectors.sysfs:SysfsSource",
    "gnmi": "fabricwatch.collectors.gnmi:GnmiSource",
    "switchcli": "fabricwatch.collectors.switchcli:SwitchCliSource",
    "ibtools": "fabricwatch.collectors.ibtools:IbToolsSource",
}


class SourceConfig(Config):
    """Base of a source's typed config; a field's name is its ``collect`` option's dest."""


class Source(ABC):
    """One scrape produces telemetry messages; a source that cannot read says so (raises or nulls)."""

    name: ClassVar[str]
    Config: ClassVar[type[SourceConfig]] = SourceConfig

    @classmethod  # noqa: B027 - an optional hook, empty by default
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Add the source's own options to ``fabricwatch collect`` (dest = a field of its Config)."""

    @classmethod
    @abstractmethod
    def build(cls, config: SourceConfig) -> Source:
        """The running source from its checked config; a source that cannot start raises InputError."""

    @abstractmethod
    def scrape(self, now: float) -> list[Message]:
        """Read the source once; ``now`` is the scrape's timestamp (from the caller's clock)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the source holds."""


def source_class(name: str) -> type[Source]:
    target = SOURCES.get(name)
    if target is None:
        raise InputError("--source", f"unknown source {name!r} (known: {', '.join(sorted(SOURCES))})")
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)
