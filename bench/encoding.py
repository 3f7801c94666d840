"""Bus encoding: what it costs to turn bus bytes into validated Arrow rows, per encoding, on the
simulator's messages of a 1024-GPU supernode. The processor pays decode *and* the conversion of
every value into Arrow, so both are timed. Run: .venv/bin/python -m bench.encoding
"""

from __future__ import annotations

import json
from collections import defaultdict

import msgspec
import orjson
from rich.console import Console
from rich.table import Table

from bench.common import median_seconds
from fabricwatch import schema
from fabricwatch.collectors.sim import Simulator
from fabricwatch.topology import generate


def to_arrow(messages: list[schema.Message]) -> None:
    by_kind: dict[str, list[schema.Message]] = defaultdict(list)
    for m in messages:
        by_kind[m.kind].append(m)
    for kind, ms in by_kind.items():
        assert not schema.to_table(kind, ms).rejected


def main() -> None:
    sim = Simulator(generate(1024, 8, 8), seed=1)
    messages = sim.step() + sim.step()
    rows = sum(schema.row_count(m) for m in messages)
    packed = [schema.encode(m) for m in messages]
    plain = [msgspec.msgpack.encode(m) for m in messages]
    as_json = [orjson.dumps(schema.to_dict(m)) for m in messages]
    plain_decoder = msgspec.msgpack.Decoder(schema.Message)
    json_decoder = msgspec.json.Decoder(schema.Message)
    cases = {
        "MessagePack, packed numeric columns (the bus)": (packed, lambda: [schema.decode(b) for b in packed]),
        "MessagePack, lists of numbers": (plain, lambda: [plain_decoder.decode(b) for b in plain]),
        "JSON, msgspec typed": (as_json, lambda: [json_decoder.decode(b) for b in as_json]),
        "JSON, orjson": (as_json, lambda: [msgspec.convert(orjson.loads(b), schema.Message) for b in as_json]),
        "JSON, standard library": (as_json, lambda: [msgspec.convert(json.loads(b), schema.Message) for b in as_json]),
    }
    table = Table(title=f"bus bytes → validated Arrow rows: {len(messages)} messages, {rows:,} rows (medians of 9)")
    for col in ("encoding", "MB", "decode rows/s", "decode + to Arrow rows/s", "vs the bus"):
        table.add_column(col, justify="left" if col == "encoding" else "right")
    results = {}
    for name, (data, decode) in cases.items():
        decode_s = median_seconds(decode, repeat=9)
        total_s = median_seconds(lambda decode=decode: to_arrow(decode()), repeat=9)
        results[name] = (sum(map(len, data)), decode_s, total_s)
    base = results["MessagePack, packed numeric columns (the bus)"][2]
    for name, (size, decode_s, total_s) in results.items():
        table.add_row(name, f"{size / 1e6:.2f}", f"{rows / decode_s:,.0f}", f"{rows / total_s:,.0f}",
                      f"{total_s / base:.2f}× the time")  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()
