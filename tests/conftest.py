"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch import topology

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="session")
def topo128() -> topology.Topology:
    return topology.generate(128, rails=8, gpus_per_node=8)


@pytest.fixture(scope="session")
def topo1024() -> topology.Topology:
    return topology.generate(1024, rails=8, gpus_per_node=8)
