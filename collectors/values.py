"""Reading numbers out of tool output, and the unit conversions every parser shares.

Tools print ``N/A``, ``[Not Supported]``, ``-inf dBm`` or an empty field where they cannot read a
value; all of these become ``None`` (the schema's null), never a number. Conversions are exact
(no rounding): whoever displays a value rounds it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from fabricwatch.schema import KINDS, Message, make

# An optical power register counts in 0.1 µW (SFF-8472 §9.2, SFF-8636 §6.7, CMIS §8.9), so a reading
# of 0 means "below 0.1 µW": no light. 0.1 µW is -40 dBm, the value DESIGN §4 uses for loss of signal,
# so a measured zero becomes -40 dBm rather than -inf. A power the tool does not report stays null.
LOS_DBM = -40.0

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?\b(?:inf|nan)\b", re.IGNORECASE)
_NOT_A_VALUE = {"", "n/a", "na", "none", "unknown", "not supported", "not available", "disabled", "-", "--"}


def number(text: Any) -> float | None:
    """The first number in ``text`` (``'27 C'`` → 27.0, ``'67.03 W'`` → 67.03); None for N/A-like text.

    >>> number("912.500 mV"), number("[N/A]"), number("Not Supported")
    (912.5, None, None)
    """
    if text is None:
        return None
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return float(text) if math.isfinite(text) else None
    s = str(text).strip().strip("[]").strip()
    if s.lower() in _NOT_A_VALUE:
        return None
    m = _NUMBER.search(s)
    if m is None:
        return None
    value = float(m.group())
    return value if math.isfinite(value) else None


def integer(text: Any) -> int | None:
    """A whole count (``'4000'`` → 4000); None for N/A and for text that is not a whole number."""
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, int):
        return text
    s = str(text).strip()
    if re.fullmatch(r"[-+]?\d+", s):
        return int(s)
    value = number(s)
    if value is None or value != int(value):
        return None
    return int(value)


def mw_to_dbm(mw: float | None) -> float | None:
    """Optical power in mW → dBm, 10·log10(mW); a measured 0 mW is :data:`LOS_DBM` (see above)."""
    if mw is None:
        return None
    if mw <= 0.0:
        return LOS_DBM
    return 10.0 * math.log10(mw)


def clean_text(text: Any) -> str | None:
    """A vendor string as the module stores it, without padding; None when empty or N/A."""
    if text is None:
        return None
    s = str(text).strip()
    return None if s.lower() in _NOT_A_VALUE else s


def message(kind: str, source: str, ts: float, rows: Iterable[dict[str, Any]]) -> Message:
    """Row dicts → one columnar message with EVERY column of the kind, null where a row has no value.

    Writing out the nulls says "this source cannot read it" explicitly (DESIGN §3) instead of
    leaving a reader to guess whether a column was forgotten.
    """
    spec = KINDS[kind]
    rows = list(rows)
    columns = {c.name: [row.get(c.name) for row in rows] for c in spec.columns}
    return make(kind, source, ts, 0, columns)


def messages(source: str, ts: float, rows_by_kind: dict[str, list[dict[str, Any]]]) -> list[Message]:
    """One message per kind that has rows, in the schema's kind order (deterministic output)."""
    return [message(kind, source, ts, rows_by_kind[kind]) for kind in KINDS if rows_by_kind.get(kind)]
