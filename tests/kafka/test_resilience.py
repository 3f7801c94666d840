"""The producer path when the broker is away: bounded buffer, oldest dropped and counted, reconnect, no crash."""

from __future__ import annotations

import io
import threading
import time

import pytest

from fabricwatch.schema import topic_of
from stream.bus import Outgoing
from stream.kafka import KafkaBus
from stream.localbroker import LocalBroker, free_port
from tests.kafka.conftest import start_broker
from tests.kafka.test_kafka_bus import drain

pytestmark = pytest.mark.kafka
GPU = topic_of("gpu")


def numbered(start: int, n: int) -> list[Outgoing]:
    return [Outgoing(GPU, f"node{i % 5:03d}", str(i).encode(), 1764400000.0 + i) for i in range(start, start + n)]


def test_unreachable_at_start_buffers_the_newest_and_delivers_them_once_it_is_up(tmp_path) -> None:
    port = free_port()
    notice = io.StringIO()
    bus = KafkaBus(f"127.0.0.1:{port}", buffer_max=50, notice=notice)
    bus.produce(numbered(0, 120))  # returns at once although nothing listens
    assert bus.stats.dropped == 70 and bus.pending() == 50
    deadline = time.monotonic() + 10
    while "cannot be reached" not in notice.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    (line,) = notice.getvalue().splitlines()
    assert line.startswith(f"kafka: broker 127.0.0.1:{port} cannot be reached") and "buffering up to 50" in line
    # a collector flushes after every scrape: while the broker is away that must return, keeping the buffer
    flusher = threading.Thread(target=bus.flush)
    flusher.start()
    flusher.join(30)
    assert not flusher.is_alive() and bus.pending() == 50

    broker = start_broker(tmp_path / "late", port=port)
    try:
        bus.flush(60)
        assert (bus.stats.sent, bus.stats.dropped, bus.pending()) == (50, 70, 0)
        assert "connected to" in notice.getvalue()
        consumer = KafkaBus(broker.bootstrap, group_id="late")
        consumer.subscribe([GPU])
        assert sorted(int(r.value) for r in drain(consumer, 50)) == list(range(70, 120))  # the newest 50
        consumer.close()
    finally:
        bus.close()
        broker.stop()


def test_a_20_s_outage_loses_only_what_overflows_the_buffer(own_broker: LocalBroker) -> None:
    """Like a collector at 20 scrapes/s: the broker stops for 20 s and comes back on the same port."""
    notice = io.StringIO()
    bus = KafkaBus(own_broker.bootstrap, buffer_max=300, notice=notice, partitions=2)
    produced = 0
    stop = threading.Event()

    def collector() -> None:
        nonlocal produced
        while not stop.is_set():
            bus.produce(numbered(produced, 5))
            produced += 5
            bus.flush()  # as collectors.runner.BusSink does after every scrape
            time.sleep(0.05)

    thread = threading.Thread(target=collector)
    thread.start()
    try:
        time.sleep(2)
        own_broker.stop()
        time.sleep(20)
        during = bus.pending()
        own_broker.start()
        time.sleep(2)
    finally:
        stop.set()
        thread.join()
    bus.flush(90)
    # the bound held while the broker was away, and the collector kept going (it offered about 2,000 records)
    assert during == 300 and produced > 1500
    assert bus.pending() == 0 and bus.stats.dropped > 1000
    assert bus.stats.sent + bus.stats.dropped == produced  # every record delivered or counted
    lines = notice.getvalue()
    assert "acknowledged nothing" in lines and "resumed" in lines

    consumer = KafkaBus(own_broker.bootstrap, group_id="after-outage")
    consumer.subscribe([GPU])
    got = sorted(int(r.value) for r in drain(consumer, bus.stats.sent, timeout_s=60))
    assert len(got) == len(set(got)) == bus.stats.sent  # none twice
    assert got[-1] == produced - 1  # the newest arrived
    consumer.close()
    bus.close()
