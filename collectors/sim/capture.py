"""Writing a simulated run to a capture file (DESIGN §6), as ``fabricwatch simulate`` does."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from fabricwatch.collectors.sim.simulator import Simulator
from fabricwatch.errors import InputError
from fabricwatch.faults import FaultPlan
from fabricwatch.replay.capture import CaptureWriter
from fabricwatch.schema import Message, row_count, topic_of
from fabricwatch.topology import Topology


def message_key(topology: Topology, message: Message) -> str:
    """The bus key of a message: its fault domain (DESIGN §1).

    ``gpu`` and ``switch`` messages are keyed by their source; the per-port kinds by the fault domain
    of their first port (a node's ports, or a switch's).
    """
    if message.kind in ("gpu", "switch"):
        return message.source
    ports = message.rows.get("port")
    return topology.fault_domain(ports[0]) if ports else message.source


def scrape_count(duration: float, interval: float) -> int:
    """Scrapes at t = 0, interval, ... up to and including ``duration``."""
    return math.floor(duration / interval + 1e-9) + 1


def simulate_capture(
    topology: Topology,
    plan: FaultPlan,
    duration: float,
    interval: float,
    out: Path,
    progress: bool = True,
    compresslevel: int = 3,
) -> int:
    """Simulate ``duration`` seconds and write them to ``out``; returns the number of messages written.

    The header carries the topology and the faults as ground truth (``truth``; the plan's pathologies
    shape the messages but are never truth); every message is one line. ``progress`` shows a rich
    progress bar on stderr.
    """
    if not (duration > 0 and math.isfinite(duration)):
        raise InputError("--duration", f"must be a number of seconds > 0, not {duration!r}")
    sim = Simulator(topology, plan.faults, seed=plan.seed, interval=interval, pathologies=plan.pathologies)
    steps = scrape_count(duration, interval)
    written = rows = 0
    started = time.perf_counter()
    console = Console(file=sys.stderr)
    bar = Progress(
        TextColumn("[bold]simulate[/]"),
        BarColumn(),
        TextColumn("t={task.fields[sim_t]:>7.0f} s"),
        TextColumn("{task.fields[rate]:>9,.0f} rows/s"),
        TimeRemainingColumn(),
        console=console,
        disable=not progress,
        transient=False,
    )
    with CaptureWriter(out, topology, plan.to_list(), compresslevel=compresslevel) as writer, bar:
        task = bar.add_task("simulate", total=steps, sim_t=0.0, rate=0.0)
        for _ in range(steps):
            for message in sim.step():
                writer.write(topic_of(message.kind), message_key(topology, message), message.ts, message)
                written += 1
                rows += row_count(message)
            elapsed = time.perf_counter() - started
            bar.update(task, advance=1, sim_t=sim.t, rate=rows / elapsed if elapsed > 0 else 0.0)
    return written
