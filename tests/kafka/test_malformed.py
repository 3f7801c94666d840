"""Issue 3 item 7c: 10,000 malformed records among good ones, through ``fabricwatch serve``."""

from __future__ import annotations

import random
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter

import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fabricwatch import schema
from fabricwatch.schema import TOPIC_DEADLETTER, topic_of
from fabricwatch.stream.bus import Outgoing
from fabricwatch.stream.deadletter import read_deadletter
from fabricwatch.stream.kafka import KafkaBus
from tests.kafka.helpers import (
    GPUS_PER_MESSAGE,
    ROOT,
    T0,
    committed_total,
    gpu_message,
    gpu_rows,
    produce_all,
    stop_process,
    wait_until,
)
from tests.kafka.localbroker import free_port
from tests.kafka.test_kafka_bus import drain

pytestmark = pytest.mark.kafka
GPU = topic_of("gpu")
BAD = 10_000
GOOD = 10_000
pack = msgspec.msgpack.encode


def good(i: int) -> bytes:
    return schema.encode(gpu_message(i % 50, i // 50))


def gpu_dict(**change) -> dict:
    return {**schema.to_dict(gpu_message(1, 1)), **change}


def bad(i: int, rng: random.Random) -> tuple[bytes, str]:
    """The i-th malformed record and the dead-letter code it must get."""
    kinds = [
        # garbage bytes: 0xc1 is a byte MessagePack never uses, then noise
        (lambda: b"\xc1" + rng.randbytes(rng.randint(0, 300)), "undecodable"),
        # MessagePack cut short
        (lambda: schema.encode(gpu_message(2, 2))[: rng.randint(1, 40)], "undecodable"),
        # a field missing, or of the wrong type
        (lambda: pack({"schema": schema.SCHEMA, "kind": "gpu"}), "structure"),
        (lambda: pack(gpu_dict(seq="seventeen")), "structure"),
        # a schema this version does not know, an unknown kind
        (lambda: pack(gpu_dict(schema="fabricwatch.telemetry/v0")), "schema"),
        (lambda: pack(gpu_dict(kind="laser")), "schema"),
        # wrong value types, NaN, huge values
        (lambda: pack(gpu_dict(rows={"device": ["node001/gpu0"], "temp_c": ["hot"]})), "value"),
        (lambda: pack(gpu_dict(rows={"device": ["node001/gpu0"], "temp_c": [float("nan")]})), "value"),
        (lambda: pack(gpu_dict(rows={"device": ["node001/gpu0"], "power_w": [1e300]})), "value"),
        # a port message on the gpu topic
        (lambda: schema.encode(schema.make("port", "leaf0-0", T0, 1, {"port": ["leaf0-0:p00"]})), "topic_mismatch"),
    ]
    make, code = kinds[i % len(kinds)]
    return make(), code


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_every_good_row_is_stored_and_every_bad_record_dead_lettered_with_its_reason(
    kafka, tmp_path, processes
) -> None:
    rng = random.Random(7)
    records, expected_codes, bad_values = [], Counter(), []
    for i in range(GOOD):
        records.append(Outgoing(GPU, f"node{i % 50:03d}", good(i), T0))
        if i < BAD - 1:
            value, code = bad(i, rng)
            records.append(Outgoing(GPU, f"node{i % 50:03d}", value, T0))
            expected_codes[code] += 1
            bad_values.append(value)
    five_mb = b"\xc1" + rng.randbytes(5 * 1024 * 1024)  # under the topic's 8 MiB limit: it reaches the processor
    records.insert(len(records) // 2, Outgoing(GPU, "node007", five_mb, T0))
    expected_codes["undecodable"] += 1
    bad_values.append(five_mb)
    produce_all(kafka.bootstrap, records)

    port = free_port()
    config = tmp_path / "serve.yaml"
    config.write_text(
        f"bootstrap: {kafka.bootstrap}\ndb: p.duckdb\ngroup: {kafka.group}\nmax_records: 2000\n"
        f"http: {{listen: 127.0.0.1, port: {port}}}\n"
    )
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabricwatch", "serve", "--config", str(config)], cwd=ROOT, stdout=log, stderr=log
    )
    processes.append(proc)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _up(base), 60, "the HTTP endpoint")
        wait_until(lambda: committed_total(kafka.bootstrap, kafka.group) == len(records), 180, "every record")
        # still serving after all that
        assert get(f"{base}/healthz")[0] == 200
        assert get(f"{base}/readyz") == (200, f"ready: {5 * kafka.partitions} partitions\n")  # 5 telemetry topics
        status, metrics = get(f"{base}/metrics")
        assert status == 200
        counted = {
            sample.labels["code"]: sample.value
            for family in text_string_to_metric_families(metrics)
            for sample in family.samples
            if sample.name == "fabricwatch_deadlettered_messages_total"
        }
        assert {code: n for code, n in counted.items() if n} == expected_codes
        assert get(f"{base}/nothing")[0] == 404
    finally:
        assert stop_process(proc) == 0
    assert gpu_rows(tmp_path / "p.duckdb") == (GOOD * GPUS_PER_MESSAGE, GOOD * GPUS_PER_MESSAGE)

    reader = KafkaBus(kafka.bootstrap, group_id=kafka.group + "-dl")
    reader.subscribe([TOPIC_DEADLETTER])
    letters = [read_deadletter(r.value) for r in drain(reader, BAD, timeout_s=60)]
    reader.close()
    assert len(letters) == BAD
    assert Counter(d.code for d in letters) == expected_codes
    assert sorted(d.value for d in letters) == sorted(bad_values)  # the original bytes, each once
    assert all(d.reason and d.topic == GPU for d in letters)
    five = next(d for d in letters if d.value == five_mb)
    assert five.reason.startswith("undecodable")


def _up(base: str) -> bool:
    try:
        return get(f"{base}/healthz")[0] == 200
    except OSError:
        return False
