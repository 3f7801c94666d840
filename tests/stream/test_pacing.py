"""The pacer keeps a backlog's partitions within ``ahead_s`` of each other and always moves on."""

from __future__ import annotations

from fabricwatch.stream.bus import MemoryBus
from fabricwatch.stream.pacing import Pacer
from tests.stream.buses import PartitionAtATimeBus

A, B = ("t", 0), ("t", 1)


def bus_with_backlog(b_unread: int) -> MemoryBus:
    bus = PartitionAtATimeBus(partitions=2)
    bus.subscribe(["t"])
    bus._next_offset[B] = b_unread  # partition B has this many records not read yet
    return bus


def test_a_partition_ahead_of_one_with_a_backlog_is_held_at_its_first_record_past_the_limit() -> None:
    pacer = Pacer(bus_with_backlog(5), ahead_s=10.0)
    pacer.handed([(B, 100.0)])
    assert pacer.limit([(A, 100.0), (A, 105.0), (A, 120.0)]) == 110.0


def test_nothing_is_held_when_no_other_partition_has_a_backlog() -> None:
    pacer = Pacer(bus_with_backlog(0), ahead_s=10.0)
    assert pacer.limit([(A, 100.0), (A, 500.0)]) is None


def test_a_record_stamped_out_of_order_never_holds_its_own_partition_at_its_first_record() -> None:
    """Another producer's record stamped an hour back, read after this partition's current ones: the
    limit stands on the first record read, so that one is always handed on (no livelock)."""
    pacer = Pacer(bus_with_backlog(5), ahead_s=10.0)
    assert pacer.limit([(A, 4000.0), (A, 4005.0), (A, 400.0)]) is None
    assert pacer.limit([(A, 4000.0), (A, 4030.0), (A, 400.0)]) == 4010.0


def test_held_partitions_are_released_once_the_slowest_catches_up() -> None:
    bus = bus_with_backlog(5)
    pacer = Pacer(bus, ahead_s=10.0)
    pacer.handed([(B, 100.0)])
    pacer.hold({A: (3, 130.0)})
    assert A in bus.paused
    pacer.release_due()
    assert A in bus.paused  # B stands at 100: 130 is more than 10 s ahead
    pacer.handed([(B, 125.0)])
    pacer.release_due()
    assert A not in bus.paused and not pacer.held


def test_a_bus_read_in_produce_order_is_never_held() -> None:
    bus = MemoryBus(partitions=2)
    bus.subscribe(["t"])
    bus._next_offset[B] = 5
    assert Pacer(bus, ahead_s=10.0).limit([(A, 100.0), (A, 500.0), (B, 100.0)]) is None
