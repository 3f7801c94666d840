"""Helpers for the collector tests: run ``fabricwatch`` in-process."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

import fabricwatch.cli as cli


@pytest.fixture
def fw(capsysbinary) -> Callable[..., tuple[int, bytes, str]]:
    """Run ``fabricwatch ARGS`` in-process; returns (exit status, stdout bytes, stderr text)."""

    def run(*args: str) -> tuple[int, bytes, str]:
        code = cli.main(list(args))
        out, err = capsysbinary.readouterr()
        return code, out, err.decode()

    return run


def jsonl(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]
