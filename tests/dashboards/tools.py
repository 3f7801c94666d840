"""Debian's prometheus and prometheus-alertmanager binaries for the tests that run them (scripts/test
installs them when missing): a test without them skips, and fails under CI=true."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml


def need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        why = f"{binary} is not installed (apt-get install prometheus prometheus-alertmanager; scripts/test does)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return path


ROOT = Path(__file__).resolve().parents[2]
START_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, done: Callable[[], Any], limit_s: float, every_s: float = 0.2) -> None:
    deadline = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {limit_s:g} s for {what}")
        time.sleep(every_s)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@contextmanager
def daemon(argv: list[str], log: Path, ready_url: str, what: str) -> Iterator[subprocess.Popen]:
    """A server process on 127.0.0.1, ready when ``ready_url`` answers 200; stopped (TERM, then KILL) on exit."""
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:

            def ready() -> bool:
                assert proc.poll() is None, f"{what} exited: {log.read_text()[-2000:]}"
                return http_ok(ready_url)

            wait_until(f"{what} to be ready", ready, START_S)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@contextmanager
def alertmanager(tmp: Path, webhook: str, **timers: str) -> Iterator[str]:
    """Debian's Alertmanager with the shipped config, its receivers pointed at ``webhook``/<receiver>."""
    binary = need("prometheus-alertmanager")
    config = yaml.safe_load((ROOT / "dashboards" / "alertmanager.yaml").read_text())
    config["route"].update(timers or {"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"})
    for receiver in config["receivers"]:
        receiver["webhook_configs"][0]["url"] = f"{webhook}/{receiver['name']}"
    path = tmp / "alertmanager.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [binary, f"--config.file={path}", f"--storage.path={tmp / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="]  # fmt: skip
    with daemon(argv, tmp / "alertmanager.log", f"{url}/-/ready", "Alertmanager"):
        yield url


@contextmanager
def prometheus(tmp: Path, target: str, alertmanager_url: str) -> Iterator[str]:
    """Debian's Prometheus scraping ``target`` as job ``fabricwatch`` every 2 s (a busy processor on a
    shared machine can take over a second to answer), with the shipped rules, alerting to ``alertmanager_url``."""
    binary = need("prometheus")
    config = {
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
        "rule_files": [str(ROOT / "dashboards" / "prometheus-rules.yaml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager_url.split("//", 1)[1]]}]}]},
        "scrape_configs": [{"job_name": "fabricwatch", "static_configs": [{"targets": [target]}]}],
    }
    path = tmp / "prometheus.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [binary, f"--config.file={path}", f"--storage.tsdb.path={tmp / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{port}"]  # fmt: skip
    with daemon(argv, tmp / "prometheus.log", f"{url}/-/ready", "Prometheus"):
        yield url
