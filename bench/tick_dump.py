"""Every tick's findings and incidents as JSON, and each detector's CPU time: a speed-up changes nothing.

A change to make detection faster must leave what it finds exactly as it was. This runs the engine
over fixed worlds and writes, per tick, the stage-1 findings, the findings as correlated (samples
judged) and the incidents that changed, plus the engine's snapshot at the end; compare two dumps byte
for byte (``cmp``). A second engine restored from the first one's snapshot (through JSON, as the
processor saves it) halfway runs the remaining ticks too, and the dump says whether it made the same.

Worlds:

* ``synth``: bench/detect_tick.py's 1024-GPU windows (five concurrent faults);
* ``demo``: windows recorded from a realistic 1024-GPU demo (fabricwatch/realistic.py's fleet mix plus
  the demo's five faults), cut by the live processor (``record`` writes them to a pickle once, with
  the code of the day; ``--windows`` reads it back);
* library scenarios by name (``--library NAME ...``): the stored captures replayed through the
  processor, as tests/e2e/test_library.py does.

``--times`` prints each detector's median CPU time per tick on the synth and demo worlds.

    .venv/bin/python -m bench.tick_dump record --windows /tmp/demo-windows.pkl
    .venv/bin/python -m bench.tick_dump dump --windows /tmp/demo-windows.pkl --library healthy ... > a.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabricwatch import topology as topo_mod
from fabricwatch.detectors.engine import DetectionEngine
from fabricwatch.records import Window

DEFAULT_LIBRARY = (
    "realistic-fleet",
    "module-swap",
    "link-flap-fast",
    "connector-contamination-4db",
    "duplicate-source",
    "clock-skew-with-faults",
    "counter-wrap",
    "pfc-storm-host",
    "cooling-failure",
    "corruption-low-rate",
    "switch-reboot",
    "collector-outage-during-fault",
)


def synth_windows(gpus: int = 1024, ticks: int = 20) -> tuple[topo_mod.Topology, list[Window]]:
    """bench/detect_tick.py's windows."""
    from bench.detect_tick import synth_windows as windows

    return windows(gpus, ticks)


def record(path: Path, gpus: int, duration: float) -> None:
    """Run the realistic demo and pickle every window its processor hands the engine (and ``now``)."""
    import tempfile

    from fabricwatch.app import demo
    from fabricwatch.realistic import realistic

    topo = topo_mod.generate(gpus, rails=8)
    seen: list[tuple[Window, float]] = []
    original = DetectionEngine.run

    def run(self: DetectionEngine, window: Window, now: float) -> Any:
        seen.append((dataclasses.replace(window, cache={}), now))
        return original(self, window, now)

    DetectionEngine.run = run  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = demo.run_demo(
                topo, demo.default_faults(topo), duration=duration, interval=5.0, seed=7,
                db=Path(tmp) / "demo.duckdb", pathologies=realistic(topo, 7, duration),
            )  # fmt: skip
    finally:
        DetectionEngine.run = original  # type: ignore[method-assign]
    with path.open("wb") as out:
        pickle.dump({"gpus": gpus, "ticks": seen}, out, protocol=pickle.HIGHEST_PROTOCOL)
    print(f"{len(seen)} windows, {len(result.incidents)} incidents -> {path}", file=sys.stderr)


def load_windows(path: Path) -> tuple[topo_mod.Topology, list[tuple[Window, float]]]:
    with path.open("rb") as f:
        saved = pickle.load(f)
    ticks = saved["ticks"]
    return ticks[0][0].topology, ticks


def _finding(f: Any) -> dict[str, Any]:
    return dataclasses.asdict(f)


def _tick(engine: DetectionEngine, window: Window, now: float) -> dict[str, Any]:
    changed = engine.run(dataclasses.replace(window, cache={}), now)
    return {
        "now": now,
        "stage1": [_finding(f) for f in engine.stage1.findings],
        "findings": [_finding(f) for f in engine.findings],
        "incidents": [i.to_dict() for i in changed],
        "errors": engine.errors,
    }


def run_world(topo: topo_mod.Topology, ticks: list[tuple[Window, float]], engine_factory: Any) -> dict[str, Any]:
    """Every tick's output, the final snapshot, and whether an engine restored halfway made the same."""
    engine = engine_factory(topo)
    out = []
    half = len(ticks) // 2
    state = None
    for k, (w, now) in enumerate(ticks):
        if k == half:
            state = json.dumps(engine.snapshot(), sort_keys=True, separators=(",", ":"))
        out.append(_tick(engine, w, now))
    restored = engine_factory(topo)
    if state is not None:
        restored.restore(json.loads(state))
    again = [_tick(restored, w, now) for w, now in ticks[half:]]
    same = json.dumps(again, sort_keys=True, default=repr) == json.dumps(out[half:], sort_keys=True, default=repr)
    return {
        "ticks": out,
        "snapshot": engine.snapshot(),
        "incidents": [i.to_dict() for i in engine.incidents()],
        "restored_halfway_same": same,
    }


def library_world(name: str) -> dict[str, Any]:
    """A library scenario replayed: each tick's output as the processor ran it, then the incidents."""
    from fabricwatch.app import library
    from fabricwatch.replay.run import replay

    scenario = next(s for s in library.scenarios(library_path()) if s.name == name)
    factory = library.engine_for(scenario)
    ticks: list[dict[str, Any]] = []
    windows: list[tuple[Window, float]] = []

    def recording(topology: topo_mod.Topology) -> DetectionEngine:
        engine = factory(topology)
        original = engine.run

        def run(window: Window, now: float) -> Any:
            windows.append((dataclasses.replace(window, cache={}), now))
            changed = original(window, now)
            ticks.append(
                {
                    "now": now,
                    "stage1": [_finding(f) for f in engine.stage1.findings],
                    "findings": [_finding(f) for f in engine.findings],
                    "incidents": [i.to_dict() for i in changed],
                    "errors": engine.errors,
                }
            )
            return changed

        engine.run = run  # type: ignore[method-assign]
        return engine

    result = replay(scenario.capture, engine_factory=recording)
    topo = windows[0][0].topology if windows else None
    restored = run_world(topo, windows, factory) if topo is not None else {}
    return {
        "ticks": ticks,
        "incidents": [i.to_dict() for i in result.incidents],
        "restored_halfway_same": restored.get("restored_halfway_same"),
        "offline_same": restored.get("ticks") == ticks if restored else None,
    }


def library_path() -> Path:
    return Path(__file__).resolve().parents[1] / "replay" / "library"


def detector_times(topo: topo_mod.Topology, ticks: list[tuple[Window, float]], skip: int = 3) -> dict[str, float]:
    """Median CPU ms per tick of each detector, of stage 2 and of the whole tick (first ``skip`` ticks
    warm the baselines and are not counted)."""
    engine = DetectionEngine(topo)
    spent: dict[str, list[float]] = {}
    for d in engine.detectors:
        original = d.detect

        def timed(w: Window, original: Any = original, name: str = d.name) -> Any:
            c = time.process_time()
            try:
                return original(w)
            finally:
                spent.setdefault(name, []).append(time.process_time() - c)

        d.detect = timed  # type: ignore[method-assign]
    stage2 = engine.stage2.run

    def timed2(findings: Any, now: float) -> Any:
        c = time.process_time()
        try:
            return stage2(findings, now)
        finally:
            spent.setdefault("(stage 2)", []).append(time.process_time() - c)

    engine.stage2.run = timed2  # type: ignore[method-assign]
    for w, now in ticks:
        c = time.process_time()
        engine.run(dataclasses.replace(w, cache={}), now)
        spent.setdefault("(tick)", []).append(time.process_time() - c)
    return {n: 1000 * statistics.median(v[skip:]) for n, v in spent.items()}


def iter_worlds(args: argparse.Namespace) -> Iterator[tuple[str, topo_mod.Topology, list[tuple[Window, float]]]]:
    if not args.no_synth:
        topo, windows = synth_windows()
        yield "synth", topo, [(w, w.end) for w in windows]
    if args.windows is not None:
        topo, ticks = load_windows(args.windows)
        yield "demo", topo, ticks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("record", "dump", "times"))
    parser.add_argument("--windows", type=Path, help="the recorded demo windows (a pickle)")
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--duration", type=float, default=420.0)
    parser.add_argument("--library", nargs="*", default=list(DEFAULT_LIBRARY))
    parser.add_argument("--no-synth", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "record":
        if args.windows is None:
            parser.error("record needs --windows")
        record(args.windows, args.gpus, args.duration)
        return
    if args.command == "times":
        for name, topo, ticks in iter_worlds(args):
            times = detector_times(topo, ticks)
            print(f"{name}: " + "  ".join(f"{n} {v:.1f}" for n, v in sorted(times.items(), key=lambda kv: -kv[1])))
        return
    dump: dict[str, Any] = {}
    for name, topo, ticks in iter_worlds(args):
        dump[name] = run_world(topo, ticks, DetectionEngine)
    for name in args.library:
        dump[f"library/{name}"] = library_world(name)
    json.dump(dump, sys.stdout, sort_keys=True, default=repr, allow_nan=True)
    sys.stdout.write("\n")
    bad = [n for n, w in dump.items() if w.get("restored_halfway_same") is False or w.get("offline_same") is False]
    if bad:
        print(f"restored or offline run differs: {bad}", file=sys.stderr)


if __name__ == "__main__":
    main()
