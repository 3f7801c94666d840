"""The actions config: what may run and how; everything dry-run without it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fabricwatch.errors import InputErrors
from fabricwatch.runbooks.backends import Command, DryRun, Http
from fabricwatch.runbooks.config import ActionsConfig, load


def test_without_a_config_everything_is_dry_run() -> None:
    cfg = ActionsConfig()
    assert isinstance(cfg.backend("command"), DryRun) and isinstance(cfg.backend("message"), DryRun)


def test_a_full_config_builds_its_backends_and_guards(tmp_path: Path) -> None:
    path = tmp_path / "actions.yaml"
    path.write_text(
        "backends: {command: command, message: http}\n"
        "command: {allowlist: [echo], timeout_s: 30}\n"
        "http: {url: 'https://hooks.example/fw', token_env: FW_TOKEN, retries: 2, timeout_s: 3}\n"
        "interfaces: {switch: 'swp{port_number}'}\n"
        "guards: {min_uplink_fraction: 0.5, fabric_max: 8, blast_radius: 4, history_times: 2, history_days: 7}\n"
    )
    cfg = load(path)
    command, message = cfg.backend("command"), cfg.backend("message")
    assert isinstance(command, Command) and command.allowlist == {"echo": shutil.which("echo")}
    assert command.timeout_s == 30
    assert isinstance(message, Http) and (message.url, message.retries, message.token_env) == (
        "https://hooks.example/fw", 2, "FW_TOKEN"
    )  # fmt: skip
    g = cfg.guards
    assert (g.min_uplink_fraction, g.fabric_max, g.blast_radius, g.history_times, g.history_days) == (0.5, 8, 4, 2, 7.0)
    assert cfg.interfaces == {"switch": "swp{port_number}"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("backends: {command: shell}\n", "backends.command: 'shell' is not one of command, dry-run, http"),
        ("backends: {command: command}\n", "backends.command is command, but command.allowlist is empty"),
        ("command: {allowlist: [/bin/sh]}\n", "command.allowlist: '/bin/sh' must be an executable's name"),
        ("command: {allowlist: [no-such-tool-here]}\n", "'no-such-tool-here': not found on PATH"),
        ("backends: {message: http}\n", "http.url: an http:// or https:// URL is needed"),
        ("guards: {blast_radius: -1}\n", "guards.blast_radius: must be a number ≥ 0"),
    ],
)
def test_a_bad_config_names_file_and_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "actions.yaml"
    path.write_text(text)
    with pytest.raises(InputErrors) as err:
        load(path)
    assert any(says in str(e) and str(e).startswith(f"{path}:1:") for e in err.value.errors), str(err.value)
