"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from fabricwatch import topology

# Tests assert behaviour, never wall time: no per-example deadline on this shared, noisy machine.
settings.register_profile("fabricwatch", deadline=None)
settings.load_profile("fabricwatch")

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="session")
def topo128() -> topology.Topology:
    return topology.generate(128, rails=8, gpus_per_node=8)


@pytest.fixture(scope="session")
def topo1024() -> topology.Topology:
    return topology.generate(1024, rails=8, gpus_per_node=8)
