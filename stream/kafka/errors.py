"""Broker trouble, shared by the producer, consumer and admin sides of the Kafka bus: the error, a quick
check that the broker can be reached, which client errors are transient, the retry timing, and the one
line that tells an operator (kafka-python's own per-reconnect log lines are silenced instead).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from typing import TextIO

from kafka import errors as kerr

log = logging.getLogger("fabricwatch.kafka")

BACKOFF_START_S, BACKOFF_MAX_S = 0.5, 5.0  # a returning broker is used within 5 s; retries stay cheap
CONNECT_TIMEOUT_MS = 5_000


class KafkaUnavailable(RuntimeError):
    """The broker cannot be reached (one line: which broker and why)."""


def quiet_client_logs() -> None:
    """Silence kafka-python's per-reconnect ERROR lines unless someone set the ``kafka`` logger's level:
    the bus says what matters in one line each (unreachable, failing, resumed)."""
    client = logging.getLogger("kafka")
    if client.level == logging.NOTSET:
        client.setLevel(logging.CRITICAL)


def say(notice: TextIO, line: str) -> None:
    """One line for the operator on ``notice`` (stderr by default), also logged; a closed stream is no error."""
    log.info(line)
    with contextlib.suppress(OSError, ValueError):
        print(f"kafka: {line}", file=notice, flush=True)


def reachable(bootstrap: str, timeout_s: float = 2.0) -> None:
    """Raise :class:`KafkaUnavailable` at once when no bootstrap address accepts a TCP connection.

    kafka-python would wait its whole bootstrap timeout to say the same; this makes the first
    "cannot be reached" line and every retry quick.
    """
    problems = []
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout_s):
                return
        except ValueError:
            problems.append(f"{address.strip()!r} is not host:port")
        except OSError as exc:
            problems.append(f"{address.strip()}: {exc.strerror or exc}")
    raise KafkaUnavailable(f"broker {bootstrap} cannot be reached ({'; '.join(problems)})")


def transient(exc: BaseException) -> bool:
    """A broker or coordinator away for now (the client reconnects), not a bug or a bad request."""
    return bool(getattr(exc, "retriable", False)) or isinstance(exc, kerr.NoBrokersAvailable)


def why(exc: BaseException) -> str:
    """An exception as one short reason: its type and message, the type said once."""
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text and not text.startswith(name) else text or name
