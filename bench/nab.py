"""Score the univariate series detector on the Numenta Anomaly Benchmark (NAB), with our own scorer.

Usage: ``python bench/nab.py NAB_DIR [--only CATEGORY ...] [--json]``. NAB_DIR holds NAB's layout
(``labels/combined_windows.json`` and ``data/<category>/<file>.csv``); files named in the labels but
absent are listed and left out, so a partial copy scores what it has. NAB's code and data are not part
of this repository (AGPL); this scorer is written from the published rules (Lavin and Ahmad, "Evaluating
real-time anomaly detection algorithms — the Numenta Anomaly Benchmark", 2015, and NAB's README):

* each file's first 15 % of rows (at most 750) is a probationary period: not scored;
* a detection is a row whose score is at or above the threshold; in each labelled window only the
  earliest detection counts, weighted by the scaled sigmoid of its position, ``2 / (1 + e^(5 y)) - 1``
  with y = -1 at the window's left edge and 0 just past its right edge, divided by its value at -1 so
  that the earliest possible detection is worth exactly A_TP; a window with no detection costs A_FN;
* every detection outside a window costs A_FP times the sigmoid of its distance past the preceding
  window's right edge (in window widths), so a detection just after a window costs almost nothing and
  one with no preceding window costs the full A_FP;
* the threshold is one per detector, chosen to maximise the corpus total; the result is normalised as
  100 * (raw - null) / (perfect - null), where the null detector detects nothing (every window missed)
  and the perfect one detects each window at its first row. Standard profile: A_TP = 1, A_FP = 0.11,
  A_FN = 1.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec
import numpy as np

from fabricwatch.detectors.series import SeriesConfig, score_series

STANDARD = {"tp": 1.0, "fp": 0.11, "fn": 1.0}  # NAB's "standard" application profile
PROBATION = 0.15  # NAB: the first 15 % of each file is for learning, not scored (capped at 0.15 * 5000 rows)


def scaled_sigmoid(y: float) -> float:
    """NAB's window weight: 0.987 at the left edge (y = -1), 0 at the right edge, -1 from y >= 3 on."""
    if y >= 3.0:
        return -1.0
    return 2.0 / (1.0 + math.exp(5.0 * y)) - 1.0


@dataclass
class FileScore:
    """One file's score as a step function of the threshold: ``totals[j]`` = score with the top j rows."""

    name: str
    sorted_scores: np.ndarray  # scorable rows' anomaly scores, descending
    totals: np.ndarray  # len(sorted_scores) + 1
    windows: int  # labelled windows that are scored (not inside the probationary period)

    def at(self, thresholds: np.ndarray) -> np.ndarray:
        """The file's score at each threshold (a row is detected when its score >= threshold)."""
        counts = np.searchsorted(-self.sorted_scores, -thresholds, side="right")
        return self.totals[counts]


def probation_rows(n: int) -> int:
    return int(min(math.floor(PROBATION * n), PROBATION * 5000))


def weigh_rows(n: int, windows: list[tuple[int, int]], profile: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's weight if detected, and its window number (-1 outside any window)."""
    weight = np.zeros(n)
    window_of = np.full(n, -1)
    max_tp = scaled_sigmoid(-1.0)
    prev_right: int | None = None
    prev_width = 0.0
    bounds = sorted(windows)
    w = 0
    for i in range(n):
        while w < len(bounds) and bounds[w][1] < i:
            prev_right, prev_width = bounds[w][1], float(bounds[w][1] - bounds[w][0] + 1)
            w += 1
        if w < len(bounds) and bounds[w][0] <= i <= bounds[w][1]:
            left, right = bounds[w]
            width = float(right - left + 1)
            weight[i] = scaled_sigmoid(-(right - i + 1) / width) * profile["tp"] / max_tp
            window_of[i] = w
        else:
            # distance past the preceding window's right edge, in its widths (none before: full A_FP)
            y = 3.0 if prev_right is None else abs(prev_right - i) / max(prev_width - 1.0, 1.0)
            weight[i] = scaled_sigmoid(y) * profile["fp"]
    return weight, window_of


def score_file(
    name: str, scores: np.ndarray, windows: list[tuple[int, int]], profile: dict[str, float] = STANDARD
) -> FileScore:
    """Sweep every threshold of one file (NAB's Sweeper, re-derived)."""
    n = len(scores)
    weight, window_of = weigh_rows(n, windows, profile)
    start = probation_rows(n)
    idx = np.arange(start, n)
    order = idx[np.argsort(-scores[idx], kind="stable")]
    scored_windows = sorted({int(w) for w in window_of[start:] if w >= 0})
    best = dict.fromkeys(scored_windows, -profile["fn"])
    total = -profile["fn"] * len(scored_windows)
    totals = [total]
    for i in order:
        w = int(window_of[i])
        if w < 0:
            total += weight[i]
        elif weight[i] > best[w]:
            total += weight[i] - best[w]
            best[w] = weight[i]
        totals.append(total)
    return FileScore(name, scores[order], np.array(totals), len(scored_windows))


def window_rows(timestamps: list[datetime], windows: list[list[str]]) -> list[tuple[int, int]]:
    """Label windows as row ranges (first row at or after the start, last at or before the end)."""
    ts = np.array([t.timestamp() for t in timestamps])
    rows = []
    for start, end in windows:
        left = int(np.searchsorted(ts, _parse(start).timestamp(), side="left"))
        right = int(np.searchsorted(ts, _parse(end).timestamp(), side="right")) - 1
        if left <= right:
            rows.append((left, right))
    return rows


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.strip())


def read_series(path: Path) -> tuple[list[datetime], np.ndarray]:
    with path.open(newline="") as f:
        reader = csv.reader(f)
        next(reader)
        rows = [(_parse(r[0]), float(r[1])) for r in reader if r]
    return [r[0] for r in rows], np.array([r[1] for r in rows])


def best_threshold(files: list[FileScore]) -> tuple[float, float]:
    """The single threshold that maximises the corpus total, and that total."""
    candidates = np.unique(np.concatenate([f.sorted_scores for f in files] + [np.array([1.1])]))
    totals = sum(f.at(candidates) for f in files)
    best = int(np.argmax(totals))
    return float(candidates[best]), float(totals[best])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nab_dir", type=Path)
    parser.add_argument("--only", nargs="*", default=None, metavar="CATEGORY")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--per-file", action="store_true", help="also print each file's raw score")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a SeriesConfig field (repeatable)"
    )
    args = parser.parse_args(argv)
    overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    config = msgspec.convert(overrides, SeriesConfig)
    labels = json.loads((args.nab_dir / "labels" / "combined_windows.json").read_text())
    scored: list[tuple[str, FileScore, FileScore, FileScore]] = []
    missing = []
    for rel, windows in sorted(labels.items()):
        category = rel.split("/")[0]
        if args.only and category not in args.only:
            continue
        path = args.nab_dir / "data" / rel
        if not path.exists():
            missing.append(rel)
            continue
        timestamps, values = read_series(path)
        rows = window_rows(timestamps, windows)
        scores = score_series(values, config)
        null = np.full(len(values), 0.5)
        perfect = np.zeros(len(values))
        for left, _ in rows:
            perfect[left] = 1.0
        scored.append(
            (category, score_file(rel, scores, rows), score_file(rel, null, rows), score_file(rel, perfect, rows))
        )
    if not scored:
        print(f"no NAB files under {args.nab_dir}/data", file=sys.stderr)
        return 2
    threshold, raw = best_threshold([s[1] for s in scored])
    _, null_total = best_threshold([s[2] for s in scored])
    _, perfect_total = best_threshold([s[3] for s in scored])
    at = np.array([threshold])
    by_cat: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0, 0])
    for category, det, null, perfect in scored:
        row = by_cat[category]
        row[0] += float(det.at(at)[0])
        row[1] += float(null.at(np.array([1.1]))[0])
        row[2] += float(perfect.at(np.array([1.0]))[0])
        row[3] += 1
        row[4] += det.windows
    normalised = 100.0 * (raw - null_total) / (perfect_total - null_total)
    result = {
        "threshold": threshold,
        "raw": raw,
        "null": null_total,
        "perfect": perfect_total,
        "standard_score": normalised,
        "files": len(scored),
        "missing": missing,
        "categories": {
            cat: {"files": r[3], "windows": r[4], "raw": r[0], "score": 100.0 * (r[0] - r[1]) / (r[2] - r[1])}
            for cat, r in sorted(by_cat.items())
            if r[2] != r[1]
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'category':<24} {'files':>5} {'windows':>7} {'raw':>8} {'score':>7}")
    for cat, r in result["categories"].items():
        print(f"{cat:<24} {r['files']:>5} {r['windows']:>7} {r['raw']:>8.2f} {r['score']:>7.1f}")
    if args.per_file:
        for _, det, null, _perfect in scored:
            print(f"  {det.name:<60} {float(det.at(at)[0]):7.2f} (null {float(null.at(np.array([1.1]))[0]):.0f})")
    print(f"NAB standard score: {normalised:.1f} on {len(scored)} files (threshold {threshold:.4f}; raw {raw:.2f},")
    print(f"  null {null_total:.2f}, perfect {perfect_total:.2f}); {len(missing)} labelled files absent")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
