"""Load and validate runbook files: every problem is one line naming the file and line.

The library ships in ``library/`` beside this module; ``load_library(extra_dir)`` adds a site's own.
A runbook is checked whole at load (unknown keys, unknown templates or placeholders, an executable
that is a placeholder, SQL parameters that do not exist), so nothing is discovered mid-incident.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from fabricwatch.errors import InputError, InputErrors
from fabricwatch.faults import CAUSES
from fabricwatch.incident import SEVERITIES
from fabricwatch.runbooks.model import (
    AGGS,
    OPS,
    STEP_KINDS,
    TAKES_OUT,
    Action,
    Condition,
    Runbook,
    Step,
    Trigger,
    Validation,
)
from fabricwatch.runbooks.render import SQL_NAMES, SQL_PARAM, TARGET_NAMES, names
from fabricwatch.runbooks.templates import TEMPLATES
from fabricwatch.topology import load_yaml

LIBRARY = Path(__file__).resolve().parent / "library"
INCIDENT_TYPES = tuple(sorted({c.incident_type for c in CAUSES.values()} | {"collector_silent"}))
ENTITIES = ("link", "port", "gpu", "node", "switch", "rack", "cooling_loop", "collector")
CONDITION_KINDS = ("gpu", "optical", "port", "switch")
CONDITION_OF = ("gpu", "gpus", "ports", "switch_port", "source")
CHANNELS = ("notify", "ticket", "request")

_TOP = {"name", "summary", "trigger", "takes_out", "params", "steps", "validation", "return_to_service", "replace_with"}
_TRIGGER = {"type", "cause", "severity", "entity", "evidence"}
_ACTION = {"template", "argv", "env", *CHANNELS}
_STEP = {
    "diagnose": {"sql"},
    "act": {*_ACTION, "destructive"},
    "verify": {"condition", "timeout_s", "every_s", "hold_s"},
    "rollback": set(_ACTION),
    "escalate": {*CHANNELS, "when"},
}
_CONDITION = {"kind", "metric", "of", "agg", "op", "value", "window_s"}
_VALIDATION = {*_ACTION, "conditions", "hold_s", "timeout_s", "every_s"}


class _Checker:
    def __init__(self, path: Path, lines: dict[int, int]) -> None:
        self.path = path
        self.lines = lines
        self.errors: list[InputError] = []

    def line_of(self, node: Any, default: int = 1) -> int:
        return self.lines.get(id(node), default)

    def bad(self, node: Any, message: str, line: int | None = None) -> None:
        self.errors.append(InputError(f"{self.path}:{line or self.line_of(node)}", message))

    def keys(self, node: dict, allowed: set[str], where: str) -> None:
        for key in node:
            if key not in allowed:
                self.bad(node, f"{where}: unknown key {key!r} (known: {', '.join(sorted(allowed))})")

    def strings(self, node: dict, key: str, allowed: tuple[str, ...] | None, where: str) -> tuple[str, ...]:
        value = node.get(key)
        items = value if isinstance(value, list) else [value]
        out = []
        for item in items:
            if not isinstance(item, str) or (allowed is not None and item not in allowed):
                known = f" (one of: {', '.join(allowed)})" if allowed else ""
                self.bad(node, f"{where}.{key}: {item!r} is not valid{known}")
            else:
                out.append(item)
        return tuple(out)

    def number(self, node: dict, key: str, default: float, where: str, low: float = 0.0) -> float:
        value = node.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < low:
            self.bad(node, f"{where}.{key}: must be a number ≥ {low:g}, not {value!r}")
            return default
        return float(value)

    def placeholders(self, node: Any, text: str, known: set[str], where: str) -> None:
        for name in names(text):
            if name not in known:
                self.bad(node, f"{where}: unknown placeholder {{{name}}} (known: {', '.join(sorted(known))})")


def load_runbook(path: str | Path) -> Runbook:
    """Parse one runbook file; raises :class:`InputErrors` with every problem, each at file:line."""
    path = Path(path)
    data, lines = load_yaml(path)
    c = _Checker(path, lines)
    if not isinstance(data, dict):
        raise InputError(f"{path}:1", "a runbook is a mapping (name, trigger, steps, ...)")
    c.keys(data, _TOP, "runbook")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        c.bad(data, "name: missing or not a string")
        name = path.stem
    elif name != path.stem:
        c.bad(data, f"name {name!r} must match the file name {path.stem!r}")
    params = data.get("params") or {}
    if not isinstance(params, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) and not isinstance(v, bool) for k, v in params.items()
    ):
        c.bad(data, "params: must map names to literal strings or numbers")
        params = {}
    known = set(TARGET_NAMES) | set(params)
    trigger = _trigger(c, data.get("trigger"), data)
    takes_out = data.get("takes_out", "none")
    if takes_out not in TAKES_OUT:
        c.bad(data, f"takes_out: {takes_out!r} is not one of {', '.join(TAKES_OUT)}")
        takes_out = "none"
    raw_steps = data.get("steps")
    steps: list[Step] = []
    if not isinstance(raw_steps, list) or not raw_steps:
        c.bad(data, "steps: must be a non-empty list")
        raw_steps = []
    for i, raw in enumerate(raw_steps):
        step = _step(c, raw, i, data, known)
        if step is not None:
            steps.append(step)
    validation = None
    if data.get("validation") is not None:
        validation = _validation(c, data["validation"], data, known)
    back = None
    if data.get("return_to_service") is not None:
        raw = data["return_to_service"]
        if isinstance(raw, dict):
            c.keys(raw, _ACTION, "return_to_service")
            back = _action(c, raw, "return_to_service", known)
        else:
            c.bad(data, "return_to_service: must be a mapping (template: ... or argv: [...])")
    if takes_out != "none" and back is not None and validation is None:
        c.bad(data, "return_to_service needs a validation (a device never returns unchecked)")
    if not any(s.kind in ("act", "escalate") for s in steps):
        c.bad(data, "steps: a runbook needs at least one act or escalate step")
    replace_with = data.get("replace_with")
    if replace_with is not None and not isinstance(replace_with, str):
        c.bad(data, "replace_with: must be a runbook name")
        replace_with = None
    summary = data.get("summary", "")
    if not isinstance(summary, str):
        c.bad(data, "summary: must be a string")
        summary = ""
    if c.errors:
        raise InputErrors(c.errors)
    return Runbook(
        name, summary, trigger, takes_out, tuple(steps), dict(params), validation, back, replace_with, str(path)
    )  # type: ignore[arg-type]


def _trigger(c: _Checker, raw: Any, parent: dict) -> Trigger:
    if not isinstance(raw, dict):
        c.bad(parent, "trigger: must be a mapping (type, cause, severity)")
        return Trigger((), (), SEVERITIES)
    c.keys(raw, _TRIGGER, "trigger")
    types = c.strings(raw, "type", INCIDENT_TYPES, "trigger")
    causes = c.strings(raw, "cause", tuple(CAUSES), "trigger") if "cause" in raw else ()
    severities = c.strings(raw, "severity", SEVERITIES, "trigger") if "severity" in raw else SEVERITIES
    entity = raw.get("entity")
    if entity is not None and entity not in ENTITIES:
        c.bad(raw, f"trigger.entity: {entity!r} is not one of {', '.join(ENTITIES)}")
    for cause in causes:
        if types and CAUSES[cause].incident_type not in types:
            c.bad(raw, f"trigger: cause {cause} gives incidents of type {CAUSES[cause].incident_type}, not {types}")
    metric = at_least = None
    if "evidence" in raw:
        ev = raw["evidence"]
        if not isinstance(ev, dict) or set(ev) != {"metric", "at_least"} or not isinstance(ev.get("metric"), str):
            c.bad(raw, "trigger.evidence: must be {metric: NAME, at_least: NUMBER}")
        else:
            metric = ev["metric"]
            at_least = c.number(ev, "at_least", 0.0, "trigger.evidence", low=-math.inf)
    return Trigger(types, causes, severities, entity, metric, at_least)


def _action(c: _Checker, raw: dict, where: str, known: set[str]) -> Action | None:
    chosen = [k for k in ("template", "argv", *CHANNELS) if k in raw]
    if len(chosen) != 1:
        c.bad(raw, f"{where}: needs exactly one of template, argv, {', '.join(CHANNELS)} (has {chosen or 'none'})")
        return None
    env: list[tuple[str, str]] = []
    raw_env = raw.get("env") or {}
    if not isinstance(raw_env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw_env.items()):
        c.bad(raw, f"{where}.env: must map variable names to strings")
    else:
        for k, v in raw_env.items():
            c.placeholders(raw, v, known, f"{where}.env.{k}")
            env.append((k, v))
    kind = chosen[0]
    if kind in CHANNELS:
        text = raw[kind]
        if not isinstance(text, str) or not text.strip():
            c.bad(raw, f"{where}.{kind}: must be a message")
            return None
        c.placeholders(raw, text, known, f"{where}.{kind}")
        return Action(message=text, channel=kind, env=tuple(env))
    if kind == "template":
        name = raw["template"]
        if name not in TEMPLATES:
            c.bad(raw, f"{where}.template: unknown template {name!r} (known: {', '.join(TEMPLATES)})")
            return None
        argv = TEMPLATES[name]
    else:
        argv = raw["argv"]
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str | int) for a in argv):
            c.bad(raw, f"{where}.argv: must be a non-empty list of strings")
            return None
        argv = tuple(str(a) for a in argv)
        if names(argv[0]) or "/" in argv[0]:
            # a name the actions config's allowlist maps to a path: a runbook cannot pick a binary
            c.bad(raw, f"{where}.argv[0]: the executable must be a literal name (no path), not {argv[0]!r}")
            return None
    for a in argv:
        c.placeholders(raw, a, known, f"{where}.argv")
    return Action(argv=tuple(argv), env=tuple(env), template=raw.get("template"))


def _condition(c: _Checker, raw: Any, where: str, parent: Any) -> Condition | None:
    if not isinstance(raw, dict):
        c.bad(parent, f"{where}: must be a mapping (kind, metric, of, agg, op, value)")
        return None
    c.keys(raw, _CONDITION, where)
    kind, of, agg, op = raw.get("kind"), raw.get("of"), raw.get("agg", "last"), raw.get("op")
    metric = raw.get("metric")
    ok = True
    for key, value, allowed in (("kind", kind, CONDITION_KINDS), ("of", of, CONDITION_OF), ("agg", agg, AGGS)):
        if value not in allowed:
            c.bad(raw, f"{where}.{key}: {value!r} is not one of {', '.join(allowed)}")
            ok = False
    if op not in OPS:
        c.bad(raw, f"{where}.op: {op!r} is not one of {' '.join(OPS)}")
        ok = False
    if ok and kind is not None:
        from fabricwatch.schema import KINDS

        columns = {col.name for col in KINDS[kind].columns}
        if metric not in columns:
            c.bad(raw, f"{where}.metric: {metric!r} is not a column of {kind} ({', '.join(sorted(columns))})")
            ok = False
    value = c.number(raw, "value", 0.0, where, low=-math.inf)
    window = c.number(raw, "window_s", 60.0, where, low=1.0)
    if "value" not in raw:
        c.bad(raw, f"{where}.value: missing")
        ok = False
    return Condition(kind, metric, of, agg, op, value, window) if ok else None  # type: ignore[arg-type]


def _step(c: _Checker, raw: Any, i: int, parent: dict, known: set[str]) -> Step | None:
    where = f"steps[{i}]"
    if not isinstance(raw, dict):
        c.bad(parent, f"{where}: must be a mapping like {{act: NAME, template: ...}}")
        return None
    kinds = [k for k in STEP_KINDS if k in raw]
    if len(kinds) != 1:
        c.bad(raw, f"{where}: needs exactly one of {', '.join(STEP_KINDS)} naming the step (has {kinds or 'none'})")
        return None
    kind = kinds[0]
    name = raw[kind]
    line = c.line_of(raw)
    if not isinstance(name, str) or not name:
        c.bad(raw, f"{where}.{kind}: the step's name must be a string")
        return None
    where = f"steps[{i}] ({kind} {name})"
    c.keys(raw, _STEP[kind] | {kind}, where)
    if kind == "diagnose":
        sql = raw.get("sql")
        if not isinstance(sql, str) or not sql.strip():
            c.bad(raw, f"{where}.sql: missing")
            return None
        if "{" in sql and names(sql):
            c.bad(raw, f"{where}.sql: use $name parameters, never {{placeholders}} pasted into SQL")
        for p in SQL_PARAM.findall(sql):
            if p not in SQL_NAMES:
                c.bad(raw, f"{where}.sql: unknown parameter ${p} (known: {', '.join(sorted(SQL_NAMES))})")
        return Step(kind, name, line, sql=sql)
    if kind == "verify":
        cond = _condition(c, raw.get("condition"), f"{where}.condition", raw)
        return Step(
            kind,
            name,
            line,
            condition=cond,
            timeout_s=c.number(raw, "timeout_s", 300.0, where, low=1.0),
            every_s=c.number(raw, "every_s", 15.0, where, low=0.1),
            hold_s=c.number(raw, "hold_s", 0.0, where),
        )
    if kind == "escalate":
        when = raw.get("when", "failure")
        if when not in ("always", "failure"):
            c.bad(raw, f"{where}.when: must be always or failure, not {when!r}")
        action = _action(c, raw, where, known)
        return Step(kind, name, line, action=action, when=when)
    destructive = raw.get("destructive", kind == "act")
    if not isinstance(destructive, bool):
        c.bad(raw, f"{where}.destructive: must be true or false")
        destructive = True
    action = _action(c, raw, where, known)
    return Step(kind, name, line, action=action, destructive=destructive and kind == "act")


def _validation(c: _Checker, raw: Any, parent: dict, known: set[str]) -> Validation | None:
    if not isinstance(raw, dict):
        c.bad(parent, "validation: must be a mapping (argv/template, conditions, hold_s, timeout_s)")
        return None
    c.keys(raw, _VALIDATION, "validation")
    action = _action(c, raw, "validation", known) if any(k in raw for k in ("template", "argv")) else None
    conditions = []
    raw_conditions = raw.get("conditions") or []
    if not isinstance(raw_conditions, list):
        c.bad(raw, "validation.conditions: must be a list")
        raw_conditions = []
    for j, rc in enumerate(raw_conditions):
        cond = _condition(c, rc, f"validation.conditions[{j}]", raw)
        if cond is not None:
            conditions.append(cond)
    if action is None and not conditions:
        c.bad(raw, "validation: needs a diagnostic command (argv/template) or conditions")
    return Validation(
        action,
        tuple(conditions),
        hold_s=c.number(raw, "hold_s", 0.0, "validation"),
        timeout_s=c.number(raw, "timeout_s", 3600.0, "validation", low=1.0),
        every_s=c.number(raw, "every_s", 30.0, "validation", low=0.1),
        line=c.line_of(raw),
    )


def load_library(extra: str | Path | None = None) -> dict[str, Runbook]:
    """Every runbook of the shipped library, plus ``extra`` (a folder of the site's own, which win)."""
    folders = [LIBRARY] + ([Path(extra)] if extra else [])
    books: dict[str, Runbook] = {}
    errors: list[InputError] = []
    for folder in folders:
        if not folder.is_dir():
            raise InputError(str(folder), "no such runbook folder")
        for path in sorted(folder.glob("*.yaml")):
            try:
                rb = load_runbook(path)
            except InputErrors as exc:
                errors.extend(exc.errors)
                continue
            except InputError as exc:
                errors.append(exc)
                continue
            books[rb.name] = rb
    for rb in books.values():
        if rb.replace_with and rb.replace_with not in books:
            errors.append(InputError(rb.path, f"replace_with: no runbook named {rb.replace_with!r}"))
    if errors:
        raise InputErrors(errors)
    return books
