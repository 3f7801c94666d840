"""The actions config: which backend runs what, the command allowlist, the webhook, the guards.

Separate from the runbooks on purpose: a runbook says *what* to do, this file (owned by whoever runs
fabricwatch) says what may run and how. Without it everything is ``dry-run``. Example::

    backends: {command: command, message: http}   # argv actions / notify, ticket, request
    command: {allowlist: {kubectl: /usr/bin/kubectl, gnmic: /usr/local/bin/gnmic}, timeout_s: 120}
    http: {url: https://hooks.example/fabricwatch, token_env: FABRICWATCH_WEBHOOK_TOKEN, retries: 3}
    interfaces: {switch: "Ethernet{port_number}", host: "rdma{gpu_index}"}
    guards: {min_uplink_fraction: 0.75, fabric_percent: 5, fabric_max: 16, domain_percent: 25,
             domain_max: 4, rate_per_domain_per_hour: 6, blast_radius: 16, history_times: 3, history_days: 30}
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricwatch.errors import InputError, InputErrors
from fabricwatch.runbooks.backends import REGISTRY, Backend, build
from fabricwatch.runbooks.guards import GuardConfig
from fabricwatch.topology import load_yaml

_TOP = {"backends", "command", "http", "interfaces", "guards"}


@dataclass(frozen=True, slots=True)
class ActionsConfig:
    command_backend: str = "dry-run"
    message_backend: str = "dry-run"
    allowlist: dict[str, str] = field(default_factory=dict)
    command_timeout_s: float = 120.0
    http: dict[str, Any] = field(default_factory=dict)
    interfaces: dict[str, str] = field(default_factory=dict)
    guards: GuardConfig = field(default_factory=GuardConfig)

    def backend(self, which: str, say: Callable[[str], None] | None = None) -> Backend:
        """The backend for argv actions (``command``) or for messages (``message``)."""
        name = self.command_backend if which == "command" else self.message_backend
        if name == "dry-run":
            return build("dry-run", {"say": say})
        if name == "command":
            return build("command", {"allowlist": self.allowlist, "timeout_s": self.command_timeout_s})
        return build(name, dict(self.http))


def load(path: str | Path) -> ActionsConfig:
    data, lines = load_yaml(path)
    errors: list[InputError] = []

    def bad(node: Any, message: str) -> None:
        errors.append(InputError(f"{path}:{lines.get(id(node), 1)}", message))

    if data is None:
        return ActionsConfig()
    if not isinstance(data, dict):
        raise InputError(f"{path}:1", "the actions config is a mapping (backends, command, http, guards)")
    for key in set(data) - _TOP:
        bad(data, f"unknown key {key!r} (known: {', '.join(sorted(_TOP))})")
    backends = data.get("backends") or {}
    chosen = {"command": "dry-run", "message": "dry-run"}
    if not isinstance(backends, dict):
        bad(data, "backends: must be a mapping {command: NAME, message: NAME}")
        backends = {}
    for key, value in backends.items():
        if key not in chosen:
            bad(backends, f"backends: unknown key {key!r} (known: command, message)")
        elif value not in REGISTRY or (key == "message" and value == "command"):
            bad(backends, f"backends.{key}: {value!r} is not one of {', '.join(sorted(REGISTRY))}")
        else:
            chosen[key] = value
    command = data.get("command") or {}
    allowlist: dict[str, str] = {}
    timeout = 120.0
    if not isinstance(command, dict) or set(command) - {"allowlist", "timeout_s"}:
        bad(data, "command: must be a mapping with allowlist and timeout_s")
    else:
        raw = command.get("allowlist") or []
        items = raw.items() if isinstance(raw, dict) else ((name, None) for name in raw if isinstance(raw, list))
        for name, where in items:
            if not isinstance(name, str) or "/" in name:
                bad(command, f"command.allowlist: {name!r} must be an executable's name")
                continue
            resolved = where if isinstance(where, str) else shutil.which(name)
            if resolved is None or not Path(resolved).is_absolute():
                bad(command, f"command.allowlist: {name!r}: not found on PATH (give its absolute path)")
                continue
            allowlist[name] = resolved
        t = command.get("timeout_s", 120.0)
        if isinstance(t, bool) or not isinstance(t, int | float) or t <= 0:
            bad(command, "command.timeout_s: must be a number of seconds > 0")
        else:
            timeout = float(t)
    if chosen["command"] == "command" and not allowlist:
        bad(data, "backends.command is command, but command.allowlist is empty")
    http = data.get("http") or {}
    http_keys = {"url", "token_env", "timeout_s", "retries", "backoff_s"}
    if not isinstance(http, dict) or set(http) - http_keys:
        bad(data, f"http: must be a mapping with {', '.join(sorted(http_keys))}")
        http = {}
    elif "http" in chosen.values() and not str(http.get("url", "")).startswith(("http://", "https://")):
        bad(http or data, "http.url: an http:// or https:// URL is needed by the http backend")
    interfaces = data.get("interfaces") or {}
    if not isinstance(interfaces, dict) or set(interfaces) - {"switch", "host"}:
        bad(data, "interfaces: must be a mapping with switch and host name patterns")
        interfaces = {}
    guards = data.get("guards") or {}
    known = {f.name: f for f in dataclasses.fields(GuardConfig)}
    values: dict[str, Any] = {}
    if not isinstance(guards, dict):
        bad(data, "guards: must be a mapping")
        guards = {}
    for key, value in guards.items():
        if key not in known:
            bad(guards, f"guards: unknown key {key!r} (known: {', '.join(known)})")
        elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            bad(guards, f"guards.{key}: must be a number ≥ 0")
        else:
            values[key] = type(known[key].default)(value)
    if errors:
        raise InputErrors(errors)
    return ActionsConfig(
        chosen["command"], chosen["message"], allowlist, timeout, dict(http), dict(interfaces), GuardConfig(**values)
    )
