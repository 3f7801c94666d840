"""Fixtures for tests against a real Kafka broker.

``kafka_bootstrap`` is the broker of the session: the one scripts/test started (FABRICWATCH_KAFKA), or
else a throwaway one started here. With CI=true a missing broker fails every Kafka test loudly; only
outside CI are they skipped, with the reason. ``kafka`` gives a test freshly created fabricwatch
topics on that broker (deleted and recreated: earlier tests' records never leak in). ``own_broker``
is a broker of the test's own, for tests that stop and restart it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fabricwatch.schema import ALL_TOPICS
from tests.kafka.localbroker import BrokerError, LocalBroker, answers

PARTITIONS = 4


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Fail under CI (a Kafka test must never pass by not running there), else skip with the reason."""
    if _in_ci():
        pytest.fail(f"Kafka broker needed under CI=true: {reason}", pytrace=False)
    pytest.skip(f"no Kafka broker: {reason} (scripts/test starts one)")


def start_broker(run_dir: Path, port: int | None = None) -> LocalBroker:
    """A broker of the caller's own (stopped by the caller); missing Java or Maven: fail under CI, else skip."""
    try:
        return LocalBroker.create(run_dir, port).start()
    except BrokerError as exc:
        unavailable(str(exc))
        raise  # unreachable: unavailable() raises


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    named = os.environ.get("FABRICWATCH_KAFKA")
    if named:
        if not answers(named, timeout_s=10.0):
            unavailable(f"FABRICWATCH_KAFKA={named} does not answer")
        yield named
        return
    broker = start_broker(tmp_path_factory.mktemp("kafka") / "broker")
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@dataclass
class Kafka:
    """The session broker with fresh topics, and a group id of the test's own."""

    bootstrap: str
    group: str
    partitions: int = PARTITIONS


def delete_topics(bootstrap: str) -> None:
    """Delete fabricwatch's topics and wait until the broker no longer lists them."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fabricwatch-tests")
    try:
        present = [t for t in admin.list_topics() if t in ALL_TOPICS]
        if present:
            admin.delete_topics(present)
        deadline = time.monotonic() + 30
        while any(t in ALL_TOPICS for t in admin.list_topics()):
            if time.monotonic() > deadline:
                pytest.fail("fabricwatch topics were not deleted within 30 s")
            time.sleep(0.05)
    finally:
        admin.close()


def reset_topics(bootstrap: str, partitions: int = PARTITIONS) -> None:
    """Delete fabricwatch's topics and create them anew, empty."""
    from kafka import KafkaAdminClient

    from fabricwatch.stream.kafka import ensure_topics

    delete_topics(bootstrap)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fabricwatch-tests")
    try:
        ensure_topics(admin, ALL_TOPICS, partitions=partitions)
    finally:
        admin.close()


@pytest.fixture
def kafka(kafka_bootstrap: str) -> Kafka:
    reset_topics(kafka_bootstrap)
    return Kafka(kafka_bootstrap, f"test-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    broker = start_broker(tmp_path / "broker")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def processes() -> Iterator[list]:
    """Processes a test starts: any still running at the end are killed (a failed test leaks none)."""
    started: list = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
