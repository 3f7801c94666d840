"""The I/O at the edge of every tool source: run a command, GET a URL, read a file.

Each failure becomes a :class:`ScrapeError` with a short ``reason`` (the label of the failed-scrape
counter) and one line saying what went wrong. Commands are argv lists run without a shell, always
with a timeout; nothing read from telemetry is ever put into a command.
"""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from fabricwatch.errors import InputError

# Failed-scrape reasons (a small fixed set, STYLE 12). A parser's InputError counts as "unparseable", a message
# the schema rejects as "invalid", an unexpected exception (a bug) as "error".
REASONS = ("missing_tool", "timeout", "exit_status", "unparseable", "io", "http", "no_device", "invalid", "error")
MAX_OUTPUT_BYTES = 64 * 1024 * 1024  # a runaway tool must not eat the collector's memory


class ScrapeError(InputError):
    """A scrape that failed for a known reason; ``place`` names the source and what it ran or read."""

    def __init__(self, place: str, message: str, reason: str) -> None:
        assert reason in REASONS, reason
        super().__init__(place, message)
        self.reason = reason


def run(argv: Sequence[str], timeout_s: float, place: str) -> str:
    """Run ``argv`` (no shell) and return its stdout; missing tool, timeout or non-zero exit raise."""
    shown = " ".join(argv)
    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ScrapeError(place, f"{argv[0]} not found (is it installed and on PATH?)", "missing_tool") from None
    except PermissionError:
        raise ScrapeError(place, f"{argv[0]} is not executable", "missing_tool") from None
    except subprocess.TimeoutExpired:
        raise ScrapeError(place, f"timed out after {timeout_s:g}s running {shown}", "timeout") from None
    except OSError as exc:
        raise ScrapeError(place, f"cannot run {shown}: {exc.strerror or exc}", "missing_tool") from None
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip().splitlines()
        detail = f": {err[-1].strip()}" if err else ""
        raise ScrapeError(place, f"{shown} exited with status {done.returncode}{detail}", "exit_status")
    return done.stdout[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")


def http_get(url: str, timeout_s: float, place: str) -> str:
    """GET ``url`` and return the body as text; any network or HTTP error raises with reason "http"."""
    if not url.startswith(("http://", "https://")):
        raise ScrapeError(place, f"{url!r} is not an http(s) URL", "http")
    request = urllib.request.Request(url, headers={"Accept": "text/plain"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(MAX_OUTPUT_BYTES)
            charset = response.headers.get_content_charset() or "utf-8"
    except urllib.error.HTTPError as exc:
        raise ScrapeError(place, f"GET {url}: HTTP {exc.code} {exc.reason}", "http") from None
    except urllib.error.URLError as exc:
        raise ScrapeError(place, f"GET {url}: {exc.reason}", "http") from None
    except TimeoutError:
        raise ScrapeError(place, f"GET {url}: timed out after {timeout_s:g}s", "timeout") from None
    except OSError as exc:
        raise ScrapeError(place, f"GET {url}: {exc.strerror or exc}", "http") from None
    return body.decode(charset, "replace")


def read_text(path: str | Path, place: str) -> str:
    """A saved tool output as text; a missing or unreadable file raises with reason "io"."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ScrapeError(place, f"{path}: no such file", "io") from None
    except IsADirectoryError:
        raise ScrapeError(place, f"{path} is a folder, expected a file", "io") from None
    except OSError as exc:
        raise ScrapeError(place, f"{path}: {exc.strerror or exc}", "io") from None
    return data.decode("utf-8", "replace")


class PartialScrape(ScrapeError):
    """Some of a scrape failed: ``messages`` holds what was read; the runner sends them and counts a failure."""

    def __init__(self, errors: list[ScrapeError | InputError], messages: list) -> None:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(first.place, first.message + more, getattr(first, "reason", "unparseable"))
        self.errors = errors
        self.messages = messages
