"""The producer path when the broker is away: bounded buffer, oldest dropped and counted, reconnect, no crash."""

from __future__ import annotations

import io
import threading
import time

import duckdb
import pytest

from fabricwatch.schema import topic_of
from fabricwatch.stream.bus import Outgoing
from fabricwatch.stream.kafka import KafkaBus
from tests.kafka.conftest import start_broker
from tests.kafka.helpers import GPUS_PER_MESSAGE, gpu_records, gpu_rows, wait_until
from tests.kafka.localbroker import free_port
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


def test_a_20_s_outage_loses_only_what_overflows_the_buffer_and_processing_resumes(own_broker, tmp_path) -> None:
    """Issue 3 item 7b. A collector at 20 scrapes/s and a processor; the broker stops for 20 s and comes
    back on the same port: the buffered scrapes arrive, the overflow is counted, the processor resumes."""
    from fabricwatch.clock import WallClock
    from fabricwatch.stream.consume import ProcessingLoop
    from fabricwatch.stream.processor import Processor
    from fabricwatch.stream.store import Store
    from fabricwatch.topology import Topology

    notice = io.StringIO()
    bus = KafkaBus(own_broker.bootstrap, buffer_max=300, notice=notice, partitions=2)
    sent_seqs: list[int] = []
    stop_collector, stop_processor = threading.Event(), threading.Event()

    def collector() -> None:
        seq = 0
        while not stop_collector.is_set():
            bus.produce(gpu_records(5, nodes=5, first_seq=seq))
            sent_seqs.append(seq)
            seq += 1
            bus.flush()  # as collectors.runner.BusSink does after every scrape
            time.sleep(0.05)

    store = Store(tmp_path / "p.duckdb", group="outage")
    loop = ProcessingLoop(
        KafkaBus(own_broker.bootstrap, group_id="outage"),
        Processor(Topology("t", [], [], []), store, clock=WallClock()),
    )
    threads = [threading.Thread(target=collector), threading.Thread(target=loop.run, args=(stop_processor,))]
    for t in threads:
        t.start()
    try:
        time.sleep(3)
        own_broker.stop()
        time.sleep(20)
        during = bus.pending()
        own_broker.start()
        time.sleep(3)
    finally:
        stop_collector.set()
        threads[0].join()
    try:
        bus.flush(90)
        produced = 5 * len(sent_seqs)
        # the bound held while the broker was away, and the collector kept going (it offered ~2,000 records)
        assert during == 300 and produced > 1500
        assert bus.pending() == 0 and bus.stats.dropped > 1000
        assert bus.stats.sent + bus.stats.dropped == produced  # every record delivered or counted
        lines = notice.getvalue()
        assert "acknowledged nothing" in lines and "resumed" in lines
        # processing resumed: everything delivered is stored, once, the newest scrape included
        wait_until(lambda: loop.stats.records >= bus.stats.sent, 120, f"the processor to store {bus.stats.sent}")
    finally:
        print("processor:", loop.stats)
        stop_processor.set()
        threads[1].join(30)
        bus.close()
        store.close()
    rows, distinct = gpu_rows(tmp_path / "p.duckdb")
    assert rows == distinct == bus.stats.sent * GPUS_PER_MESSAGE
    con = duckdb.connect(str(tmp_path / "p.duckdb"), read_only=True)
    ((newest,),) = con.execute("SELECT max(seq) FROM gpu").fetchall()
    con.close()
    assert newest == sent_seqs[-1]


def test_a_consumer_polling_through_an_outage_never_raises(own_broker) -> None:
    """kafka-python can raise a connection error out of poll() while the broker is away (a metadata
    refresh failing at the wrong moment); the bus turns that into empty polls, said once, so a
    processing loop lives through the outage instead of dying in its thread."""
    notice = io.StringIO()
    producer = KafkaBus(own_broker.bootstrap, partitions=2)
    consumer = KafkaBus(own_broker.bootstrap, group_id="through-outage", notice=notice)
    consumer.subscribe([topic_of("gpu")])
    producer.produce(gpu_records(2, nodes=2))
    producer.flush(30)
    assert len(drain(consumer, 2)) == 2
    own_broker.stop()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert consumer.poll(timeout_s=0.5) == []  # raises here without the fix
    own_broker.start()
    producer.produce(gpu_records(2, nodes=2, first_seq=2))
    producer.flush(60)
    assert len(drain(consumer, 2, timeout_s=90)) == 2  # and it reads again once the broker is back
    producer.close()
    consumer.close()
