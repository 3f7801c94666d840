"""Ingest speed: the processor's validate-and-store path against the raw limits, in the same run.

Raw limits: DuckDB's columnar insert of an Arrow table (INSERT … SELECT), and, for contrast, row-by-row
executemany. Processor: decode MessagePack → validate → Arrow → DuckDB, with offsets, no detection.
Run: .venv/bin/python -m bench.ingest
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb
from rich.console import Console
from rich.table import Table

from bench.common import median_seconds
from collectors.sim import Simulator
from fabricwatch import schema
from fabricwatch.clock import VirtualClock
from fabricwatch.topology import generate
from stream.bus import Record
from stream.processor import Processor
from stream.store import Store


def main() -> None:
    topo = generate(1024, 8, 8)
    sim = Simulator(topo, seed=3)
    messages = [m for _ in range(4) for m in sim.step()]
    rows = sum(schema.row_count(m) for m in messages)
    records = [Record(schema.topic_of(m.kind), m.source, schema.encode(m), m.ts, 0, i) for i, m in enumerate(messages)]
    optical = schema.to_table("optical", [m for m in messages if m.kind == "optical"]).table
    with tempfile.TemporaryDirectory() as tmp:
        con = duckdb.connect(str(Path(tmp) / "raw.duckdb"))
        con.execute(_ddl("optical"))

        def arrow_insert() -> None:
            con.register("t", optical)
            con.execute("INSERT INTO optical SELECT * FROM t")
            con.unregister("t")

        arrow_s = median_seconds(arrow_insert)
        sample = optical.slice(0, 2000).to_pylist()
        values = [tuple(r.values()) for r in sample]
        marks = ", ".join("?" * len(optical.schema))
        many_s = median_seconds(lambda: con.executemany(f"INSERT INTO optical VALUES ({marks})", values), repeat=3)
        con.close()

        offset = [0]

        def process() -> None:
            with Store(Path(tmp) / f"p{offset[0]}.duckdb") as store:
                offset[0] += 1
                Processor(topo, store, clock=VirtualClock()).handle(records)

        proc_s = median_seconds(process, repeat=5)

    raw_rate = optical.num_rows / arrow_s
    table = Table(title=f"ingest, 1024-GPU supernode, {len(messages):,} messages / {rows:,} rows (medians)")
    for col in ("path", "rows/s", "vs raw Arrow insert"):
        table.add_column(col, justify="right" if col != "path" else "left")
    table.add_row("DuckDB Arrow insert (raw limit)", f"{raw_rate:,.0f}", "1.00")
    table.add_row(
        "DuckDB executemany (row by row)", f"{len(values) / many_s:,.0f}", f"{len(values) / many_s / raw_rate:.4f}"
    )
    table.add_row("processor: decode+validate+store", f"{rows / proc_s:,.0f}", f"{rows / proc_s / raw_rate:.2f}")
    Console().print(table)


def _ddl(kind: str) -> str:
    from stream.store import _kind_ddl

    return _kind_ddl(kind)


if __name__ == "__main__":
    main()
