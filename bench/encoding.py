"""Bus encoding: decode speed of MessagePack (msgspec), orjson JSON and the standard library's json
on the simulator's real messages of a 1024-GPU supernode. Run: .venv/bin/python -m bench.encoding"""

from __future__ import annotations

import json

import msgspec
import orjson
from rich.console import Console
from rich.table import Table

from bench.common import median_seconds
from collectors.sim import Simulator
from fabricwatch import schema
from fabricwatch.topology import generate


def main() -> None:
    sim = Simulator(generate(1024, 8, 8), seed=1)
    messages = sim.step() + sim.step()
    rows = sum(schema.row_count(m) for m in messages)
    packed = [schema.encode(m) for m in messages]
    as_json = [orjson.dumps(schema.to_dict(m)) for m in messages]
    typed_json = msgspec.json.Decoder(schema.Message)
    cases = {
        "msgpack (msgspec, typed)": lambda: [schema.decode(b) for b in packed],
        "JSON (msgspec, typed)": lambda: [typed_json.decode(b) for b in as_json],
        "JSON (orjson)": lambda: [orjson.loads(b) for b in as_json],
        "JSON (stdlib json)": lambda: [json.loads(b) for b in as_json],
    }
    times = {name: median_seconds(fn, repeat=15) for name, fn in cases.items()}
    base = times["msgpack (msgspec, typed)"]
    table = Table(title=f"decode {len(messages)} messages, {rows:,} rows (median of 15)")
    for col in ("encoding", "rows/s", "MB", "time vs msgpack"):
        table.add_column(col, justify="right" if col != "encoding" else "left")
    sizes = {"msgpack": sum(map(len, packed)), "JSON": sum(map(len, as_json))}
    for name, t in times.items():
        size = sizes["msgpack" if name.startswith("msgpack") else "JSON"]
        table.add_row(name, f"{rows / t:,.0f}", f"{size / 1e6:.2f}", f"{t / base:.2f}×")
    Console().print(table)


if __name__ == "__main__":
    main()
