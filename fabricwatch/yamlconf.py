"""One YAML loader for every file a person writes (topology, faults, service and detector config).

:func:`load` parses safely and remembers where each mapping, key and list item sits, so any later
check can name ``file:line``. :func:`convert` turns a loaded mapping into a frozen :class:`Config`
(a msgspec Struct that rejects unknown keys), reporting every problem at once, one line each:
``serve.yaml:7: http.lisen: unknown key (known: listen, port)``. The texts come from the types
(``Annotated[int, Meta(ge=1, le=100)]`` reads "must be an integer from 1 to 100"), so a new setting
needs no hand-written check. A problem that spans fields is raised as ``ValueError`` by the Struct's
``__post_init__`` and reported at the line of its mapping.
"""

from __future__ import annotations

import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import msgspec
import yaml

from fabricwatch.errors import InputError, InputErrors

T = TypeVar("T")


class Config(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of every typed config: frozen, unknown keys rejected, no NaN or infinite number."""

    def __post_init__(self) -> None:
        for f in msgspec.structs.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name} must be finite, not {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self, enc_hook=str)


class YamlMap(dict):
    """A mapping from YAML that knows its own line and the line of each key."""

    line: int = 0
    key_lines: dict[Any, int]


class YamlList(list):
    """A list from YAML that knows its own line and the line of each item."""

    line: int = 0
    item_lines: list[int]


def line_of(value: Any, key: Any = None) -> int | None:
    """The line of a loaded mapping or list (or of one of its keys / items); None for plain data."""
    if key is not None:
        if isinstance(value, YamlMap):
            return value.key_lines.get(key, value.line)
        if isinstance(value, YamlList) and isinstance(key, int) and 0 <= key < len(value.item_lines):
            return value.item_lines[key]
    return getattr(value, "line", None) or None


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """A safe loader whose mappings and lists remember their lines."""


def _mapping(loader: _Loader, node: yaml.MappingNode) -> YamlMap:
    out = YamlMap(loader.construct_mapping(node, deep=True))
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode):
            out.key_lines.setdefault(loader.construct_object(key_node), key_node.start_mark.line + 1)
    return out


def _sequence(loader: _Loader, node: yaml.SequenceNode) -> YamlList:
    out = YamlList(loader.construct_sequence(node, deep=True))
    out.line = node.start_mark.line + 1
    out.item_lines = [item.start_mark.line + 1 for item in node.value]
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def load(path: str | Path) -> Any:
    """Parse a YAML file (safe tags only); unreadable or malformed input is one ``file[:line]`` error."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    return loads(text, str(path))


def loads(text: str, place: str) -> Any:
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise InputError(f"{place}{line}", f"invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise InputError(place, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()


# --- typed conversion ----------------------------------------------------------------------------


def convert(data: Any, typ: type[T], place: str) -> T:
    """``data`` (from :func:`load`, or any plain mapping) as a ``typ`` Struct; every problem is reported,
    each on its own line as ``place:line: key.path: what is wrong``."""
    errors: list[InputError] = []
    value = _value(data, typ, "", data, None, place, errors)
    if errors:
        raise errors[0] if len(errors) == 1 else InputErrors(errors)
    return value


_MISSING = object()


def _where(place: str, line: int | None) -> str:
    return f"{place}:{line}" if line else place


def _fail(errors: list[InputError], place: str, line: int | None, path: str, message: str) -> None:
    errors.append(InputError(_where(place, line), f"{path}: {message}" if path else message))


def _value(value: Any, typ: Any, path: str, parent: Any, key: Any, place: str, errors: list[InputError]) -> Any:
    line = line_of(parent, key) if key is not None else line_of(value)
    struct = _struct_of(typ)
    if struct is not None and not (value is None and _allows_none(typ)):
        if not isinstance(value, dict):
            _fail(errors, place, line, path, f"must be {describe(typ)}{_not(value)}")
            return _MISSING
        return _struct(value, struct, path, place, errors, line)
    item_struct = _dict_of_structs(typ)
    if item_struct is not None:
        if not isinstance(value, dict):
            _fail(errors, place, line, path, f"must be {describe(typ)}{_not(value)}")
            return _MISSING
        out = {}
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            cls = item_struct.for_key(k) if hasattr(item_struct, "for_key") else item_struct
            if cls is None:
                known = ", ".join(item_struct.known_keys())
                _fail(errors, place, line_of(value, k), sub, f"unknown key (known: {known})")
                continue
            out[k] = _value({} if v is None else v, cls, sub, value, k, place, errors)
        return out
    try:
        out = msgspec.convert(value, typ, dec_hook=_dec_hook)
        if isinstance(out, float) and not math.isfinite(out):
            _fail(errors, place, line, path, f"must be finite, not {value!r}")
            return _MISSING
        return out
    except msgspec.ValidationError as exc:
        message = f"must be {describe(typ)}{_not(value)}"
        if not str(exc).startswith(("Expected", "Invalid")):  # the value's own type explains itself
            message = str(exc).split(" - at ")[0]
        _fail(errors, place, line, path, message)
        return _MISSING


def _struct(
    data: dict, struct: type[msgspec.Struct], path: str, place: str, errors: list[InputError], line: int | None
) -> Any:
    """A Struct from a mapping; a missing key or a problem across keys is reported at ``line`` (its key's)."""
    fields = {f.name: f for f in msgspec.structs.fields(struct)}
    before = len(errors)
    kwargs: dict[str, Any] = {}
    for k, v in data.items():
        sub = f"{path}.{k}" if path else str(k)
        f = fields.get(k) if isinstance(k, str) else None
        if f is None:
            _fail(errors, place, line_of(data, k), sub, f"unknown key (known: {', '.join(fields)})")
            continue
        if v is None and not _allows_none(f.type) and not f.required:
            continue  # an empty section or setting keeps its default
        converted = _value(v, f.type, sub, data, k, place, errors)
        if converted is not _MISSING:
            kwargs[k] = converted
    for name, f in fields.items():
        if f.required and name not in data:
            _fail(errors, place, line, f"{path}.{name}" if path else name, "missing (required)")
    if len(errors) > before:
        return _MISSING
    try:
        return struct(**kwargs)
    except (ValueError, TypeError) as exc:
        _fail(errors, place, line, path, str(exc))
        return _MISSING


def _dec_hook(typ: type, obj: Any) -> Any:
    if typ is Path and isinstance(obj, Path):
        return obj
    if typ is Path and isinstance(obj, str) and obj:
        return Path(obj)
    raise NotImplementedError(f"{typ} from {type(obj).__name__}")


def _not(value: Any) -> str:
    return "" if isinstance(value, dict | list) else f", not {value!r}"


def _strip(typ: Any) -> tuple[Any, list[msgspec.Meta]]:
    metas: list[msgspec.Meta] = []
    while typing.get_origin(typ) is typing.Annotated:
        args = typing.get_args(typ)
        typ = args[0]
        metas += [m for m in args[1:] if isinstance(m, msgspec.Meta)]
    return typ, metas


def _options(typ: Any) -> list[Any]:
    base, _ = _strip(typ)
    if typing.get_origin(base) in (Union, types.UnionType):
        return list(typing.get_args(base))
    return [base]


def _allows_none(typ: Any) -> bool:
    return type(None) in _options(typ)


def _struct_of(typ: Any) -> type[msgspec.Struct] | None:
    for t in _options(typ):
        if isinstance(t, type) and issubclass(t, msgspec.Struct):
            return t
    return None


def _dict_of_structs(typ: Any) -> type[msgspec.Struct] | None:
    base, _ = _strip(typ)
    if typing.get_origin(base) is dict:
        value = typing.get_args(base)[1]
        if isinstance(value, type) and issubclass(value, msgspec.Struct):
            return value
    return None


def describe(typ: Any) -> str:
    """What a value of ``typ`` must be, in words: "an integer from 1 to 100", "a mapping (a: ..., b: ...)"."""
    options = [t for t in _options(typ) if t is not type(None)]
    words = " or ".join(_describe_one(t, _strip(typ)[1]) for t in options)
    return f"{words} or null" if _allows_none(typ) and options else words or "null"


def _describe_one(typ: Any, metas: list[msgspec.Meta]) -> str:
    typ, more = _strip(typ)
    metas = metas + more
    bound = {k: getattr(m, k) for m in metas for k in ("ge", "gt", "le", "lt") if getattr(m, k) is not None}
    if typ is bool:
        return "true or false"
    if typ in (int, float):
        noun = "an integer" if typ is int else "a number"
        if "ge" in bound and "le" in bound:
            return f"{noun} from {bound['ge']:g} to {bound['le']:g}"
        signs = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
        limits = [f"{sign} {bound[k]:g}" for k, sign in signs if k in bound]
        return " ".join([noun, *limits][:2]) if limits else noun
    if typ is str:
        return "a non-empty string" if any(getattr(m, "min_length", None) for m in metas) else "a string"
    if typ is Path:
        return "a path"
    origin = typing.get_origin(typ)
    if origin is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(typ)))
    if origin in (tuple, list, set, frozenset) or typ in (tuple, list):
        args = [a for a in typing.get_args(typ) if a is not Ellipsis]
        return f"a list of {_plural(args[0])}" if len(args) == 1 else "a list"
    if isinstance(typ, type) and issubclass(typ, msgspec.Struct):
        names = [f.name for f in msgspec.structs.fields(typ)]
        return f"a mapping ({', '.join(f'{n}: ...' for n in names)})"
    if origin is dict or typ is dict:
        return "a mapping"
    return getattr(typ, "__name__", str(typ))


def _plural(typ: Any) -> str:
    word = _describe_one(typ, [])
    return {"an integer": "integers", "a number": "numbers", "a string": "strings", "a path": "paths"}.get(word, word)
