"""The collect loop on a virtual clock: timing, seq, failures by reason, module throttling, the bus."""

from __future__ import annotations

import io
import urllib.request

import pytest
from prometheus_client import generate_latest

from fabricwatch import schema
from fabricwatch.clock import VirtualClock
from fabricwatch.collectors.base import Source
from fabricwatch.collectors.fetch import PartialScrape, ScrapeError
from fabricwatch.collectors.metrics import CollectorMetrics, serve
from fabricwatch.collectors.runner import BusSink, Runner
from fabricwatch.collectors.values import message
from fabricwatch.errors import InputError
from fabricwatch.stream.bus import MemoryBus

T0 = 1764400000.0


class Scripted(Source):
    """A source that plays a script: each step is a list of messages or an exception to raise."""

    name = "scripted"

    def __init__(self, steps):
        self.steps = list(steps)
        self.times: list[float] = []

    @classmethod
    def build(cls, config):  # pragma: no cover - built from its script, not from a config
        raise NotImplementedError

    def scrape(self, now):
        self.times.append(now)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, Exception):
            raise step
        return step(now) if callable(step) else step


def gpu(now, temp=61.0, host="node000"):
    return [message("gpu", host, now, [{"device": f"{host}/gpu0", "temp_c": temp}])]


def module(now, vendor="INNOLIGHT"):
    return [message("module", "node000", now, [{"port": "node000/eth2:p0", "vendor": vendor}])]


class ListSink:
    def __init__(self):
        self.sent: list[schema.Message] = []

    def send(self, messages):
        self.sent.extend(messages)


def make(source, **kw):
    clock = VirtualClock(T0)
    sink = ListSink()
    log = io.StringIO()

    def sleep(s):
        assert s >= 0
        clock.advance_to(clock.now() + s)

    kw.setdefault("interval_s", 5.0)
    runner = Runner(source, sink, clock, sleep, name="scripted", log=log, **kw)
    return runner, sink, log, clock


def test_scrapes_on_a_fixed_grid_and_numbers_messages_per_source_and_kind():
    source = Scripted([lambda now: gpu(now) + gpu(now, host="node001") + module(now)])
    runner, sink, _, _ = make(source, duration_s=30.0)
    stats = runner.run()
    assert source.times == [T0 + 5 * k for k in range(6)]  # 0, 5, ..., 25: the run ends before 30
    assert stats.scrapes == 6 and stats.failed == {}
    seqs = {}
    for m in sink.sent:
        seqs.setdefault((m.source, m.kind), []).append(m.seq)
    assert seqs[("node000", "gpu")] == list(range(6))  # seq rises by one per message of a source
    assert seqs[("node001", "gpu")] == list(range(6))
    assert seqs[("node000", "module")] == [0]  # unchanged module rows are not resent every scrape


def test_an_overrunning_scrape_skips_missed_ticks():
    clock_holder = {}

    def slow(now):
        clock_holder["clock"].advance_to(now + 12.0)  # the tool took 12 s on a 5 s interval
        return gpu(now)

    source = Scripted([slow])
    runner, _, _, clock = make(source, duration_s=40.0)
    clock_holder["clock"] = clock
    runner.run()
    assert source.times == [T0, T0 + 15, T0 + 30]  # never bunched up, always on the grid


def test_module_rows_are_resent_on_change_and_every_few_minutes():
    vendors = iter(["A", "A", "B", "B", "B", "B"])
    source = Scripted([lambda now: module(now, next(vendors))])
    runner, sink, _, _ = make(source, interval_s=60.0, duration_s=360.0, module_every_s=120.0)
    runner.run()
    sent = [(m.ts - T0, m.rows["vendor"][0]) for m in sink.sent]
    assert sent == [(0, "A"), (120, "B"), (240, "B")]  # start, change, then the periodic resend


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ScrapeError("nvidia-smi", "nvidia-smi not found", "missing_tool"), "missing_tool"),
        (ScrapeError("ethtool -m eth2", "timed out after 10s", "timeout"), "timeout"),
        (InputError("nvidia-smi:12", "not valid XML: no element found"), "unparseable"),
        (KeyError("a parser bug"), "error"),  # a bug must not stop the collector
    ],
)
def test_a_failed_scrape_is_counted_logged_once_and_the_loop_goes_on(error, reason):
    source = Scripted([error, error, error, lambda now: gpu(now)])
    runner, sink, log, _ = make(source, duration_s=20.0)
    stats = runner.run()
    assert stats.scrapes == 4 and stats.failed == {reason: 3}
    assert [m.seq for m in sink.sent] == [0]  # seq counts messages sent, so no gap from failures
    lines = log.getvalue().splitlines()
    assert len(lines) == 2, lines  # the error once (not three times), then the recovery
    assert f"[{reason}]" in lines[0] and "scripted" in lines[0]
    assert "scraping again (2 more failed scrapes since)" in lines[1]


def test_a_partial_scrape_sends_what_was_read_and_counts_a_failure():
    partial = PartialScrape([ScrapeError("ethtool -m eth3", "no module", "exit_status")], gpu(T0))
    runner, sink, _, _ = make(Scripted([partial]))
    runner.scrape_once(T0)
    assert len(sink.sent) == 1 and runner.stats.failed == {"exit_status": 1}


def test_a_message_the_schema_rejects_is_not_sent():
    bad = [message("gpu", "node000", T0, [{"device": "node000/gpu0", "temp_c": 900.0}])]  # 900 °C
    runner, sink, log, _ = make(Scripted([bad + gpu(T0, host="node001")]))
    runner.scrape_once(T0)
    assert [m.source for m in sink.sent] == ["node001"]  # the good message beside it is kept
    assert runner.stats.failed == {"invalid": 1} and "900" in log.getvalue()


def test_bus_sink_produces_to_the_kind_topic_keyed_by_source():
    bus = MemoryBus()
    runner, _, _, _ = make(Scripted([lambda now: gpu(now) + module(now)]))
    runner.sink = BusSink(bus)
    runner.scrape_once(T0)
    (record,) = bus.records("fabricwatch.telemetry.gpu")
    assert record.key == "node000" and record.ts == T0
    assert schema.unpack(schema.decode(record.value)).rows["temp_c"] == [61.0]
    assert len(bus.records("fabricwatch.telemetry.module")) == 1


def test_metrics_are_served_over_http():
    metrics = CollectorMetrics()
    runner, _, _, _ = make(Scripted([lambda now: gpu(now, temp=71.5)]), observer=metrics)
    runner.scrape_once(T0)
    metrics.scraped("scripted", [], "timeout")
    server = serve(metrics, 0, "127.0.0.1")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    assert 'fabricwatch_gpu_temp_c{device="node000/gpu0",source="node000"} 71.5' in body
    assert 'fabricwatch_collector_scrape_failures_total{reason="timeout",source="scripted"} 1.0' in body
    assert "fabricwatch_gpu_power_w" not in body  # a null is left out, never exported as a number


def test_metrics_use_base_units_and_keep_last_releases_names():
    """Prometheus conventions: °C as _celsius, W as _watts, MHz as _hertz; the previous names stay one release."""
    metrics = CollectorMetrics()
    rows = {"device": ["node000/gpu0"], "temp_c": [71.5], "power_w": [640.0], "sm_clock_mhz": [1980.0]}
    message = schema.make("gpu", "node000", T0, 1, {**rows, "util_pct": [95.0]})
    metrics.scraped("node000", [message], None)
    body = generate_latest(metrics.registry).decode()
    labels = '{device="node000/gpu0",source="node000"}'
    for line in (
        f"fabricwatch_gpu_temp_celsius{labels} 71.5",
        f"fabricwatch_gpu_power_watts{labels} 640.0",
        f"fabricwatch_gpu_sm_clock_hertz{labels} 1.98e+09",
        f"fabricwatch_gpu_util_ratio{labels} 0.95",
        f"fabricwatch_gpu_temp_c{labels} 71.5",  # deprecated alias
        f"fabricwatch_gpu_sm_clock_mhz{labels} 1980.0",
    ):
        assert line in body.splitlines(), line
    assert "# HELP fabricwatch_gpu_temp_c gpu temp_c (deprecated name: use temp_celsius)" in body
    lean = CollectorMetrics()
    lean.telemetry.legacy_names = False
    lean.scraped("node000", [message], None)
    assert "fabricwatch_gpu_temp_c{" not in generate_latest(lean.registry).decode()
