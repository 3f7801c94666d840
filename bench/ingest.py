"""Ingest speed: the processor's decode-validate-store path against the raw limit, in the same run.

Raw limit: DuckDB's columnar insert of the same rows already built as Arrow tables (one
INSERT … SELECT per kind, one transaction per batch), and, for contrast, row-by-row executemany.
Processor: bus bytes → decode → validate → Arrow → DuckDB with offsets, in one transaction, no
detection. Both write to a DuckDB file on disk. Run: .venv/bin/python -m bench.ingest
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.common import median_seconds
from fabricwatch import schema
from fabricwatch.clock import VirtualClock
from fabricwatch.collectors.sim import Simulator
from fabricwatch.stream.bus import Record
from fabricwatch.stream.processor import Processor
from fabricwatch.stream.store import Store
from fabricwatch.topology import generate


def main() -> None:
    topo = generate(1024, 8, 8)
    sim = Simulator(topo, seed=3)
    messages = [m for _ in range(4) for m in sim.step()]  # 4 scrapes of a 1024-GPU supernode
    rows = sum(schema.row_count(m) for m in messages)
    records = [Record(schema.topic_of(m.kind), m.source, schema.encode(m), m.ts, 0, i) for i, m in enumerate(messages)]
    by_kind: dict[str, list[schema.Message]] = {}
    for m in messages:
        by_kind.setdefault(m.kind, []).append(m)
    tables = {kind: schema.to_table(kind, ms).table for kind, ms in by_kind.items()}

    with tempfile.TemporaryDirectory() as tmp:
        raw = Store(Path(tmp) / "raw.duckdb")
        raw_s = median_seconds(lambda: raw.write_batch(tables))
        sample = tables["optical"].slice(0, 1000)
        values = [tuple(r.values()) for r in sample.to_pylist()]
        marks = ", ".join("?" * sample.num_columns)
        many_s = median_seconds(lambda: raw.con.executemany(f"INSERT INTO optical VALUES ({marks})", values), repeat=3)
        raw.close()

        with Store(Path(tmp) / "processor.duckdb") as store:
            processor = Processor(topo, store, clock=VirtualClock())
            proc_s = median_seconds(lambda: processor.handle(records), repeat=9)

    raw_rate = rows / raw_s
    table = Table(title=f"ingest: 4 scrapes of a 1024-GPU supernode, {len(messages):,} messages, {rows:,} rows "
                  "(medians)")  # fmt: skip
    for col in ("path", "rows/s", "vs raw Arrow insert"):
        table.add_column(col, justify="right" if col != "path" else "left")
    table.add_row("DuckDB Arrow insert of the same rows (raw limit)", f"{raw_rate:,.0f}", "1.00")
    table.add_row(
        "DuckDB executemany, row by row", f"{len(values) / many_s:,.0f}", f"{len(values) / many_s / raw_rate:.4f}"
    )
    table.add_row("processor: decode + validate + store", f"{rows / proc_s:,.0f}", f"{rows / proc_s / raw_rate:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
