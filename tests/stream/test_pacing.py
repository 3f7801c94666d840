"""The pacer keeps a backlog's partitions within ``ahead_s`` of each other and always moves on."""

from __future__ import annotations

from fabricwatch.stream.bus import MemoryBus, TopicPartition
from fabricwatch.stream.pacing import Pacer
from tests.stream.buses import PartitionAtATimeBus

A, B = ("t", 0), ("t", 1)
Item = tuple[TopicPartition, float]


def stamp(item: Item) -> tuple[TopicPartition, float | None]:
    return item


def pacer_with_backlog(b_unread: int, bus: MemoryBus | None = None) -> Pacer[Item]:
    bus = bus or PartitionAtATimeBus(partitions=2)
    bus.subscribe(["t"])
    bus._next_offset[B] = b_unread  # partition B has this many records not read yet
    return Pacer(bus, ahead_s=10.0, stamp=stamp)


def test_a_partition_ahead_of_one_with_a_backlog_waits_from_its_first_item_past_the_limit() -> None:
    pacer = pacer_with_backlog(5)
    assert pacer.pace([(B, 100.0)]) == [(B, 100.0)]
    assert pacer.pace([(A, 100.0), (A, 105.0), (A, 120.0), (A, 108.0)]) == [(A, 100.0), (A, 105.0)]
    assert pacer.waiting[A] == [(A, 120.0), (A, 108.0)] and A in pacer.bus.paused  # type: ignore[attr-defined]


def test_nothing_waits_when_no_other_partition_has_a_backlog() -> None:
    pacer = pacer_with_backlog(0)
    assert pacer.pace([(A, 100.0), (A, 500.0)]) == [(A, 100.0), (A, 500.0)]


def test_the_slowest_partition_of_a_batch_always_hands_on_its_first_item() -> None:
    """Another producer's item stamped an hour back, read after this partition's current ones: the
    limit stands on the first item read, so reading moves on (no livelock)."""
    pacer = pacer_with_backlog(5)
    assert pacer.pace([(A, 4000.0), (A, 4005.0), (A, 400.0)]) == [(A, 4000.0), (A, 4005.0), (A, 400.0)]
    assert pacer.pace([(A, 4010.0), (A, 4030.0)]) == [(A, 4010.0)]


def test_waiting_items_are_released_in_order_once_the_slowest_catches_up() -> None:
    pacer = pacer_with_backlog(5)
    pacer.pace([(B, 100.0)])
    pacer.pace([(A, 100.0), (A, 130.0), (A, 131.0)])
    assert pacer.pace([(A, 132.0)]) == []  # fetched before the pause: behind what waits
    pacer.release_due()
    assert A in pacer.held  # B stands at 100: 130 is more than 10 s ahead
    assert pacer.pace([(B, 125.0)]) == [(B, 125.0)]
    pacer.release_due()
    assert not pacer.held and pacer.pending == 3
    assert pacer.pace([]) == [(A, 130.0), (A, 131.0), (A, 132.0)]


def test_a_revoked_partition_drops_what_waits() -> None:
    pacer = pacer_with_backlog(5)
    pacer.pace([(B, 100.0)])
    pacer.pace([(A, 100.0), (A, 130.0)])
    pacer.forget([A])
    assert not pacer.held and not pacer.waiting and pacer.pending == 0


def test_a_bus_read_in_produce_order_is_never_held() -> None:
    pacer = pacer_with_backlog(5, bus=MemoryBus(partitions=2))
    assert pacer.pace([(A, 100.0), (A, 500.0), (B, 100.0)]) == [(A, 100.0), (A, 500.0), (B, 100.0)]


def test_a_partition_not_read_yet_stands_where_the_consumer_says_it_is() -> None:
    """Stage 2 restarted: B has a backlog and has handed nothing on; it stands at the consumer's first
    open tick (``unread_at``), not at A's first item, so A goes no more than ``ahead_s`` past that."""
    assert pacer_with_backlog(5).pace([(A, 105.0), (A, 112.0)]) == [(A, 105.0), (A, 112.0)]  # unknown: A's start
    pacer = pacer_with_backlog(5)
    pacer.unread_at = lambda: 100.0
    assert pacer.pace([(A, 105.0), (A, 110.0), (A, 112.0)]) == [(A, 105.0), (A, 110.0)]
    pacer.release_due()
    assert A in pacer.held  # B still stands at 100
    assert pacer.pace([(B, 104.0)]) == [(B, 104.0)]
    pacer.release_due()
    assert not pacer.held and pacer.pace([]) == [(A, 112.0)]
