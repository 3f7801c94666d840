"""Placeholders: ``{name}`` inside one argv element, env value or message, replaced by plain text.

Not ``str.format`` (which reaches attributes and items) and never a shell: a value is pasted as text
into the one element that names it, so ``; rm -rf /`` or ``$(reboot)`` in a device name stays an
inert part of one argument. Unknown names are caught when a runbook is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
SQL_PARAM = re.compile(r"\$([a-z_][a-z0-9_]*)")

# Every name a target can provide (see targets.resolve); a runbook's params add to them.
TARGET_NAMES = frozenset(
    {
        "incident_id", "cause", "type", "severity", "entity", "target", "runbook",
        "link", "port_a", "port_b", "port", "switch", "switch_port", "switch_interface", "port_number",
        "node", "gpu", "gpu_index", "host_interface", "rack", "cooling_loop", "collector",
        "power_limit_w", "power_cap_w",
    }
)  # fmt: skip
SQL_NAMES = frozenset(TARGET_NAMES | {"ports", "gpus", "since", "until"})


class Missing(KeyError):
    """A placeholder that has no value for this incident (a fabric link has no {node})."""


def names(text: str) -> list[str]:
    return PLACEHOLDER.findall(text)


def render(text: str, values: Mapping[str, object]) -> str:
    def one(m: re.Match[str]) -> str:
        value = values.get(m[1])
        if value is None:
            raise Missing(m[1])
        return str(value)

    return PLACEHOLDER.sub(one, text)
