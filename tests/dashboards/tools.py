"""Debian's prometheus and prometheus-alertmanager binaries for the tests that run them (scripts/test
installs them when missing): a test without them skips, and fails under CI=true."""

from __future__ import annotations

import os
import shutil

import pytest


def need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        why = f"{binary} is not installed (apt-get install prometheus prometheus-alertmanager; scripts/test does)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return path
