"""Helpers for the simulator tests: running a simulation, tabulating it, and diffing two runs."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import pandas as pd

from fabricwatch import topology
from fabricwatch.collectors.sim import Simulator
from fabricwatch.faults import Fault, parse_faults
from fabricwatch.schema import Message

KEYS = {"gpu": ("device",), "switch": ("device",), "port": ("port",), "optical": ("port", "lane"), "module": ("port",)}


@cache
def standard(gpus: int) -> topology.Topology:
    return topology.generate(gpus, rails=8, gpus_per_node=8)


def faults_of(topo: topology.Topology, *specs: dict) -> tuple[Fault, ...]:
    return tuple(parse_faults(list(specs), topo, "test"))


def run(
    topo: topology.Topology, faults: Sequence[Fault] = (), steps: int = 48, seed: int = 5, **kw
) -> list[list[Message]]:
    sim = Simulator(topo, faults, seed=seed, **kw)
    return [sim.step() for _ in range(steps)]


@cache
def healthy(gpus: int, steps: int, seed: int = 5) -> list[list[Message]]:
    return run(standard(gpus), (), steps, seed)


def frames(scrapes: list[list[Message]]) -> dict[str, pd.DataFrame]:
    """Every row of every message, one frame per kind, with ts, source and seq."""
    columns: dict[str, dict[str, list]] = {}
    for scrape in scrapes:
        for m in scrape:
            cols = columns.setdefault(m.kind, {})
            n = 0
            for name, values in m.rows.items():
                cols.setdefault(name, []).extend(values)
                n = len(values)
            for name, value in (("ts", m.ts), ("source", m.source), ("seq", m.seq)):
                cols.setdefault(name, []).extend([value] * n)
    return {kind: pd.DataFrame(cols) for kind, cols in columns.items()}


def entity(kind: str, rows: dict, i: int):
    keys = KEYS[kind]
    return rows[keys[0]][i] if len(keys) == 1 else tuple(rows[k][i] for k in keys)


def changes(healthy_run: list[list[Message]], faulted_run: list[list[Message]]) -> dict[tuple[str, str], set]:
    """(kind, column) → entities whose value differs between two runs of the same seed.

    A message present in one run only is reported as (kind, "<message>") → {source}; a different seq
    as (kind, "<seq>").
    """
    found: dict[tuple[str, str], set] = {}
    for a_scrape, b_scrape in zip(healthy_run, faulted_run, strict=True):
        a_by = {(m.kind, m.source): m for m in a_scrape}
        b_by = {(m.kind, m.source): m for m in b_scrape}
        for key in set(a_by) ^ set(b_by):
            found.setdefault((key[0], "<message>"), set()).add(key[1])
        for key in set(a_by) & set(b_by):
            a, b = a_by[key], b_by[key]
            if a.seq != b.seq or a.ts != b.ts:
                found.setdefault((a.kind, "<seq>"), set()).add(a.source)
            for column, values in a.rows.items():
                other = b.rows[column]
                if values == other:
                    continue
                for i, (x, y) in enumerate(zip(values, other, strict=True)):
                    if x != y:
                        found.setdefault((a.kind, column), set()).add(entity(a.kind, a.rows, i))
    return found


def series(scrapes: list[list[Message]], kind: str, entity_id, column: str) -> list:
    """One entity's values of one column, scrape by scrape."""
    out = []
    for scrape in scrapes:
        for m in scrape:
            if m.kind != kind:
                continue
            rows = m.rows
            n = len(rows[KEYS[kind][0]])
            for i in range(n):
                if entity(kind, rows, i) == entity_id:
                    out.append(rows[column][i])
    return out
