"""Action backends, registered by name: ``dry-run`` (the default everywhere), ``command``, ``http``.

A backend gets one :class:`Request` (an argv list, or a message for a person or a service) and
returns an :class:`Outcome`. It never sees a shell string: the ``command`` backend execs an argv list
whose executable is in an allowlist; the ``http`` backend posts JSON. Which backend runs what is the
actions config's choice (:mod:`.config`), never the runbook's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

OUTPUT_LIMIT = 4000  # characters of a command's output kept in the audit


@dataclass(frozen=True, slots=True)
class Request:
    incident_id: str
    runbook: str
    step: str
    kind: str  # act, rollback, escalate, validate, return
    target: str
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    message: str | None = None
    channel: str | None = None
    idempotency_key: str = ""

    def describe(self) -> str:
        if self.argv:
            env = " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(self.env.items()))
            return (env + " " if env else "") + json.dumps(list(self.argv), ensure_ascii=False)
        return f"{self.channel}: {self.message}"


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    output: str = ""
    exit_code: int | None = None
    attempts: int = 1
    executed: bool = True  # False: recorded only (dry-run)


class Backend(ABC):
    """One way of carrying out a request. Set-up in ``__init__``; ``execute`` must not raise."""

    name: ClassVar[str]

    @abstractmethod
    def execute(self, request: Request) -> Outcome: ...


REGISTRY: dict[str, type[Backend]] = {}


def register(cls: type[Backend]) -> type[Backend]:
    REGISTRY[cls.name] = cls
    return cls


@register
class DryRun(Backend):
    """Prints and records the plan; nothing is executed. The default for every step."""

    name = "dry-run"

    def __init__(self, say: Callable[[str], None] | None = None) -> None:
        self.say = say

    def execute(self, request: Request) -> Outcome:
        line = f"dry-run {request.kind} {request.step}: {request.describe()}"
        if self.say is not None:
            self.say(line)
        return Outcome(True, line, None, 1, executed=False)


@register
class Command(Backend):
    """Execs an argv list (never a shell) whose executable the allowlist names.

    ``allowlist`` maps an executable's name to the absolute path to run; a name given without a path
    is looked up on PATH when the backend is built. The child gets a minimal environment (PATH, LANG)
    plus the step's own variables: incident fields reach it as separate arguments or variables only.
    """

    name = "command"

    def __init__(self, allowlist: dict[str, str], timeout_s: float = 120.0) -> None:
        self.allowlist = dict(allowlist)
        self.timeout_s = timeout_s

    def execute(self, request: Request) -> Outcome:
        if not request.argv:
            return Outcome(False, f"the command backend runs argv lists, not a {request.channel}", None, 0, False)
        path = self.allowlist.get(request.argv[0])
        if path is None:
            known = ", ".join(sorted(self.allowlist)) or "none"
            return Outcome(False, f"{request.argv[0]!r} is not in the allowlist ({known})", None, 0, False)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", **request.env}
        try:
            done = subprocess.run(
                [path, *request.argv[1:]],
                shell=False,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Outcome(False, f"{request.argv[0]} ran past {self.timeout_s:g} s and was killed", None)
        except OSError as exc:
            return Outcome(False, f"cannot run {path}: {exc.strerror or exc}", None, 1, False)
        out = (done.stdout + done.stderr).decode("utf-8", "replace")[-OUTPUT_LIMIT:]
        return Outcome(done.returncode == 0, out, done.returncode)


RETRIABLE_HTTP = {408, 425, 429, 500, 502, 503, 504}


@register
class Http(Backend):
    """POSTs the request as JSON to a webhook, with a timeout, retries and an idempotency key.

    The key (``Idempotency-Key`` header and ``idempotency_key`` field) is the same on every retry and
    on a re-run of the same incident's step, so the receiver can drop duplicates. The bearer token is
    read from the environment variable the config names, and is never logged or recorded.
    """

    name = "http"

    def __init__(
        self,
        url: str,
        *,
        token_env: str | None = None,
        timeout_s: float = 5.0,
        retries: int = 3,
        backoff_s: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url
        self.token_env = token_env
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.sleep = sleep

    def execute(self, request: Request) -> Outcome:
        body = json.dumps({**asdict(request), "argv": list(request.argv)}, sort_keys=True).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": request.idempotency_key}
        token = os.environ.get(self.token_env) if self.token_env else None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        why = ""
        for attempt in range(1, self.retries + 2):
            req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    text = resp.read(OUTPUT_LIMIT).decode("utf-8", "replace")
                    return Outcome(True, f"HTTP {resp.status} {text}".strip(), resp.status, attempt)
            except urllib.error.HTTPError as exc:
                why = f"HTTP {exc.code} {exc.reason}"
                if exc.code not in RETRIABLE_HTTP:
                    return Outcome(False, why, exc.code, attempt)
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                reason = getattr(exc, "reason", exc)
                why = f"cannot reach the webhook: {reason}"
            if attempt <= self.retries:
                self.sleep(self.backoff_s * 2 ** (attempt - 1))
        return Outcome(False, f"{why} (after {self.retries + 1} attempts)", None, self.retries + 1)


def build(name: str, settings: dict[str, Any]) -> Backend:
    """A backend by its registered name; ``settings`` are its constructor's keyword arguments."""
    if name == "dry-run":
        return DryRun(settings.get("say", lambda line: print(line, file=sys.stderr)))
    return REGISTRY[name](**settings)
