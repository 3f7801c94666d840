"""Source ``ethtool``: optics (``ethtool -m``), NIC counters (``ethtool -S``) and link state of host NICs.

Per ``--iface`` it runs ``ethtool -m IFACE`` (``--json -m`` with ``--module-json``), ``ethtool -S IFACE``
and ``ethtool IFACE``, each an argv list with the ``--timeout``, and turns them into ``optical``,
``module`` and ``port`` rows (parsers: ethtool_module.py, ethtool_stats.py). One interface or
command failing does not lose the others: what was read is sent and the scrape counts as failed.
``fabricwatch parse --source ethtool FILE --iface eth2`` reads any of the four outputs, recognised by
their content.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Annotated, Any, ClassVar

import msgspec

from fabricwatch.collectors import ethtool_module, ethtool_stats, fetch
from fabricwatch.collectors.toolsource import Options, ToolConfig, ToolSource, read_saved
from fabricwatch.collectors.values import messages
from fabricwatch.errors import InputError
from fabricwatch.schema import Message


def parse_output(text: str, port: str, lanes: int | None, place: str) -> dict[str, list[dict[str, Any]]]:
    """Any one ethtool output → rows by kind, recognised by content (-S, link, -m JSON or -m text)."""
    if "NIC statistics:" in text:
        return {"port": [{"port": port, **ethtool_stats.parse_stats(text, place)}]}
    if "Settings for" in text:
        return {"port": [{"port": port, **ethtool_stats.parse_link(text, place)}]}
    return ethtool_module.rows(ethtool_module.parse(text, place), port, lanes)


def merge_port_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for row in rows:
        target = merged.setdefault(row["port"], {})
        for k, v in row.items():
            if target.get(k) is None:
                target[k] = v
    return list(merged.values())


class EthtoolConfig(ToolConfig):
    iface: tuple[str, ...] = ()  # interfaces to read
    ethtool: str = "ethtool"  # the ethtool binary
    module_json: bool = False  # run 'ethtool --json -m' (ethtool ≥ 6.9)
    no_stats: bool = False  # skip ethtool -S and the link settings
    lanes: Annotated[int, msgspec.Meta(ge=1)] | None = None  # lanes the modules use (None: as printed)


class EthtoolSource(ToolSource):
    name: ClassVar[str] = "ethtool"
    Config = EthtoolConfig
    saved_input = "ethtool -m, ethtool --json -m, ethtool -S or ethtool IFACE output (give --iface)"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--iface", action="append", metavar="IFACE", help="interface to read (repeatable)")
        parser.add_argument("--ethtool", default="ethtool", metavar="PATH", help="the ethtool binary")
        parser.add_argument("--module-json", action="store_true", help="run 'ethtool --json -m' (ethtool ≥ 6.9)")
        parser.add_argument("--no-stats", action="store_true", help="skip ethtool -S and the link settings")
        parser.add_argument(
            "--lanes", type=int, metavar="N", help="lanes the modules use (default: as printed, CMIS rule applied)"
        )

    @classmethod
    def parse_saved(cls, path: Path, opts: Options, ts: float) -> list[Message]:
        ifaces = opts.config.iface
        text = read_saved(path, cls.name)
        iface = ifaces[0] if ifaces else ethtool_stats.link_iface(text)
        if not iface:
            raise InputError(f"{cls.name} {path}", "this output does not name its interface: give --iface")
        port = opts.port_map.host_port(opts.host, iface)
        return messages(opts.host, ts, parse_output(text, port, opts.config.lanes, f"{cls.name} {path}"))

    def scrape_live(self, now: float) -> list[Message]:
        ifaces = self.opts.config.iface
        if not ifaces:
            raise fetch.ScrapeError(self.name, "no --iface given", "io")
        tool = self.opts.config.ethtool
        commands = [["--json", "-m"] if self.opts.config.module_json else ["-m"]]
        if not self.opts.config.no_stats:
            commands += [["-S"], []]
        by_kind: dict[str, list[dict[str, Any]]] = {"optical": [], "module": [], "port": []}
        errors: list[InputError] = []
        for iface in ifaces:
            port = self.opts.port_map.host_port(self.opts.host, iface)
            for args in commands:
                argv = [tool, *args, iface]
                place = f"{self.name} {' '.join(argv[1:])}"
                try:
                    text = fetch.run(argv, self.opts.timeout_s, place)
                    for kind, rows in parse_output(text, port, self.opts.config.lanes, place).items():
                        by_kind[kind] += rows
                except InputError as exc:
                    errors.append(exc)
        by_kind["port"] = merge_port_rows(by_kind["port"])
        result = messages(self.opts.host, now, by_kind)
        if errors:
            raise fetch.PartialScrape(errors, result)
        return result
