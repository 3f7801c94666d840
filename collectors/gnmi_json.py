"""gNMI data as JSON → flat leaves (path with list keys, value, target), whichever form it comes in.

Accepted forms (a JSON array, one JSON document, or JSON Lines of them):

* gNMI ``SubscribeResponse``/``GetResponse``/``Notification`` messages in protobuf's JSON mapping
  (``{"update": {"timestamp", "prefix", "update": [{"path", "val"}]}}``, ``{"syncResponse": true}``,
  ``{"notification": [...]}``), camelCase or snake_case field names;
* ``gnmic get``/``subscribe`` default JSON (``{"source", "timestamp", "updates": [{"Path", "values"}]}``);
* ``gnmic --format event`` (``{"name", "timestamp", "tags": {"interface_name": ...}, "values": {path: v}}``;
  list keys come back from the ``<list>_<key>`` tags).

Values: ``stringVal``, ``intVal``/``uintVal`` (numbers or decimal strings), ``boolVal``, ``floatVal``,
``doubleVal``, ``decimalVal`` (digits × 10^-precision), ``leaflistVal``, ``jsonVal``/``jsonIetfVal`` (a
subtree, base64 in protobuf's JSON mapping or inline from gnmic, flattened with YANG list entries keyed
by their ``name``/``index``/``id``/... leaf) and ``bytesVal``: 4 or 8 bytes are read as a big-endian
IEEE float (how Junos sends optical powers, the reading telegraf's gNMI input makes too), shown at
float32 precision; other bytes are not a number (None). Module prefixes (``openconfig-interfaces:``)
are dropped from element names. Deletes and sync markers carry no values and are skipped.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from fabricwatch.errors import InputError

Elem = tuple[str, tuple[tuple[str, str], ...]]  # (name, sorted (key, value) pairs)
RESPONSE_FIELDS = {"update", "notification", "updates", "values", "syncResponse", "sync_response"}
LIST_KEYS = ("name", "index", "id", "interface-id", "severity", "lane_number", "lane", "queue")


@dataclass(frozen=True, slots=True)
class Leaf:
    path: tuple[Elem, ...]
    value: Any
    target: str | None = None

    def names(self) -> tuple[str, ...]:
        return tuple(e[0] for e in self.path)

    def key(self, elem: str, key: str) -> str | None:
        for name, keys in self.path:
            if name == elem:
                return dict(keys).get(key)
        return None


def _strip_module(name: str) -> str:
    return name.rsplit(":", 1)[-1] if ":" in name else name


def parse_path_string(text: str) -> tuple[Elem, ...]:
    """``openconfig:/interfaces/interface[name=Ethernet1/1]/state`` → elems (brackets may hold '/')."""
    s = text.strip()
    if ":/" in s.split("[", 1)[0]:
        s = s.split(":/", 1)[1]
    tokens, depth, cur = [], 0, ""
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "/" and depth == 0:
            tokens.append(cur)
            cur = ""
        else:
            cur += ch
    tokens.append(cur)
    elems = []
    for tok in tokens:
        if not tok:
            continue
        name, _, rest = tok.partition("[")
        keys = []
        for part in ("[" + rest).split("[")[1:] if rest else []:
            k, _, v = part.rstrip("]").partition("=")
            keys.append((_strip_module(k), v))
        elems.append((_strip_module(name), tuple(sorted(keys))))
    return tuple(elems)


def _proto_path(path: Any) -> tuple[Elem, ...]:
    if not isinstance(path, dict):
        return ()
    elems = []
    for e in path.get("elem", []) or []:
        keys = tuple(sorted((_strip_module(k), str(v)) for k, v in (e.get("key") or {}).items()))
        elems.append((_strip_module(str(e.get("name", ""))), keys))
    if not elems and path.get("element"):  # the deprecated string-element form
        elems = [(_strip_module(str(x)), ()) for x in path["element"]]
    return tuple(elems)


def _float_from_bytes(raw: str) -> float | None:
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(data) == 4:
        return float(str(np.float32(struct.unpack(">f", data)[0])))
    if len(data) == 8:
        return struct.unpack(">d", data)[0]
    return None


def typed_value(val: Any) -> tuple[bool, Any]:
    """A gNMI TypedValue → (is a subtree, value)."""
    if not isinstance(val, dict):
        return False, val
    for key, raw in val.items():
        k = key.replace("_", "").lower()
        if k in ("stringval", "asciival"):
            return False, raw
        if k in ("intval", "uintval"):
            try:
                return False, int(raw)
            except (TypeError, ValueError):
                return False, None
        if k in ("floatval", "doubleval"):
            try:
                return False, float(raw)
            except (TypeError, ValueError):
                return False, None
        if k == "boolval":
            return False, bool(raw)
        if k == "decimalval" and isinstance(raw, dict):
            try:
                return False, int(raw.get("digits", 0)) / 10 ** int(raw.get("precision", 0))
            except (TypeError, ValueError):
                return False, None
        if k == "bytesval":
            return False, _float_from_bytes(str(raw))
        if k == "leaflistval":
            return False, [typed_value(e)[1] for e in (raw or {}).get("element", [])]
        if k in ("jsonval", "jsonietfval"):
            if isinstance(raw, str):
                try:
                    return True, json.loads(base64.b64decode(raw).decode())
                except (binascii.Error, ValueError, UnicodeDecodeError):
                    try:
                        return True, json.loads(raw)
                    except ValueError:
                        return False, None
            return True, raw
    return True, val  # not a TypedValue: a subtree as gnmic prints it


def flatten_tree(tree: Any, base: tuple[Elem, ...], target: str | None, out: list[Leaf]) -> None:
    """A JSON (IETF) subtree under ``base`` → leaves; list entries are keyed by their key leaf."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            name = _strip_module(str(k))
            if isinstance(v, list) and v and all(isinstance(e, dict) for e in v):
                for entry in v:
                    key = next((kk for kk in LIST_KEYS if kk in entry), None)
                    keys = ((key, str(entry[key])),) if key else ()
                    flatten_tree(entry, (*base, (name, keys)), target, out)
            else:
                flatten_tree(v, (*base, (name, ())), target, out)
    else:
        out.append(Leaf(base, tree, target))


def _notification(n: dict[str, Any], out: list[Leaf]) -> None:
    prefix = n.get("prefix") or {}
    base = _proto_path(prefix)
    target = prefix.get("target") if isinstance(prefix, dict) else None
    for upd in n.get("update", []) or []:
        if not isinstance(upd, dict):
            continue
        path = (*base, *_proto_path(upd.get("path")))
        is_tree, value = typed_value(upd.get("val", upd.get("value")))
        if is_tree:
            flatten_tree(value, path, target, out)
        else:
            out.append(Leaf(path, value, target))


def _gnmic(doc: dict[str, Any], out: list[Leaf]) -> None:
    source = doc.get("source")
    target = str(source).rsplit(":", 1)[0] if source else None
    for upd in doc.get("updates", []) or []:
        base = parse_path_string(str(upd.get("Path", upd.get("path", ""))))
        for vpath, value in (upd.get("values") or {}).items():
            elems = parse_path_string(vpath)
            path = (*base, *elems[len(base) :])
            flatten_tree(value, path, target, out)


def _event(doc: dict[str, Any], out: list[Leaf]) -> None:
    tags = {str(k): str(v) for k, v in (doc.get("tags") or {}).items()}
    source = tags.get("source")
    target = source.rsplit(":", 1)[0] if source else None
    for vpath, value in (doc.get("values") or {}).items():
        elems = []
        for name, keys in parse_path_string(vpath):
            found = dict(keys)
            for tag, tv in tags.items():
                if tag.startswith(name + "_") and tag != "source":
                    found.setdefault(tag[len(name) + 1 :], tv)
            elems.append((name, tuple(sorted(found.items()))))
        out.append(Leaf(tuple(elems), value, target))


def _document(doc: Any, out: list[Leaf]) -> None:
    if isinstance(doc, list):
        for item in doc:
            _document(item, out)
        return
    if not isinstance(doc, dict):
        return
    if isinstance(doc.get("update"), dict):  # SubscribeResponse
        _notification(doc["update"], out)
    elif isinstance(doc.get("notification"), list):  # GetResponse
        for n in doc["notification"]:
            if isinstance(n, dict):
                _notification(n, out)
    elif isinstance(doc.get("update"), list):  # a bare Notification
        _notification(doc, out)
    elif "updates" in doc:
        _gnmic(doc, out)
    elif "values" in doc and "tags" in doc:
        _event(doc, out)


def leaves(text: str, place: str) -> list[Leaf]:
    """Any accepted form → leaves; raises InputError when the text is not JSON of one of those forms."""
    if not text.strip():
        raise InputError(place, "empty input, expected gNMI notifications or gnmic output as JSON")
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError as whole:
        docs = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    docs.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    line_no = whole.lineno if n == 1 else n
                    raise InputError(f"{place}:{line_no}", f"not JSON: {exc.msg}") from None
    out: list[Leaf] = []
    recognised = False
    for doc in docs:
        items = doc if isinstance(doc, list) else [doc]
        recognised |= any(
            isinstance(d, dict)
            and bool({"update", "notification", "updates", "values", "syncResponse", "sync_response"} & d.keys())
            for d in items
        )
        _document(doc, out)
    if not recognised:
        raise InputError(place, "JSON, but not gNMI notifications nor gnmic output")
    return out
