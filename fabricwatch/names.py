"""Entity names numbered once, as their rows arrive, so that each window groups integers, not strings.

Every row sits in six windows (a 60 s window every 10 s), and grouping a window's rows by port or
source means hashing its names: at 2,048 GPUs scraped every second, 2 M optical rows a tick, a
quarter of stage 1's detection time (bench/stage1.py). Numbered when a batch arrives, each name of a
batch is hashed once (a batch holds one node's or one switch's rows, a few hundred distinct names);
a window then only needs which numbers it holds, in name order (:meth:`NameCodes.factorize`).

The numbering is append-only and never read by anything but this process: it is not stored, and a
restarted processor numbers afresh. It holds at most ``LIMIT`` names (a fleet of 100,000 GPUs has
under a million ports and sources); past it, new names are left unnumbered (``UNNUMBERED``) and the
windows that hold them are grouped by hashing, as before.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NUMBERS = "numbers"  # Window.cache[(NUMBERS, kind)]: {column: (each row's number, its NameCodes)}
NULL = -1  # a null name: no entity
UNNUMBERED = -2  # a name met after the registry was full
LIMIT = 1 << 20
RECENT_DICTIONARIES = 64  # batches' names remembered: more than the kinds x source shapes one processor sees a scrape


class NameCodes:
    """The names of one column (``port``, ``device``, ``source``), numbered in order of arrival."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._code: dict[str, int] = {}
        self._names: list[str] = []
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None  # names as objects, their numbers by name
        # the last few batches' names and their numbers: a collector's batch holds the same names in
        # the same order scrape after scrape, so most batches' names are compared, not looked up
        self._recent: deque[tuple[pa.Array, np.ndarray]] = deque(maxlen=RECENT_DICTIONARIES)

    def __len__(self) -> int:
        return len(self._names)

    def encode(self, column: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Each row's number (int32): ``NULL`` for a null, ``UNNUMBERED`` past the limit."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        encoded = pc.dictionary_encode(column.cast(pa.string()))
        dictionary = encoded.dictionary
        numbers = next((n for d, n in self._recent if d.equals(dictionary)), None)
        if numbers is None:
            numbers = np.array([self._number(name) for name in dictionary.to_pylist()] + [NULL], np.int32)
            if (numbers != UNNUMBERED).all():  # a batch past the limit is not remembered: its windows hash
                self._recent.append((dictionary, numbers))
        index = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
        return pa.array(numbers[index], pa.int32())

    def _number(self, name: str) -> int:
        code = self._code.get(name)
        if code is None:
            if len(self._names) >= self.limit:
                return UNNUMBERED
            code = self._code[name] = len(self._names)
            self._names.append(name)
        return code

    def factorize(self, numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """What ``detectors.frames.factorize`` gives for the column these rows' ``numbers`` came from:
        int64 codes (-1: null) into the sorted names present; None when a row is unnumbered."""
        if len(numbers) and int(numbers.min()) < NULL:
            return None
        size = len(self._names)
        if self._sorted is None or len(self._sorted[0]) != size:
            names = np.array(self._names, dtype=object)
            # str order, as pandas' factorize(sort=True) gives it
            self._sorted = (names, np.array(sorted(range(size), key=self._names.__getitem__), dtype=np.int64))
        names, by_name = self._sorted
        present = np.zeros(size + 1, dtype=bool)  # the last slot takes the nulls (index -1)
        present[numbers] = True
        kept = by_name[present[by_name]]
        dense = np.full(size + 1, -1, dtype=np.int64)
        dense[kept] = np.arange(len(kept))
        return dense[numbers], names[kept]
