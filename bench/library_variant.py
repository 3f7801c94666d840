"""A copy of the stored library with other seeds and, optionally, every fault at another place.

The hidden scenarios are "built the same way with different seeds, places and mixes" (issue 9). This
writes each scenario file of ``replay/library`` into ``OUT`` with its seed + ``--seed-offset``; with
``--move-faults`` each fault also moves to another place of the same kind, drawn per scenario from
the scenario's own topology: a link to another link of its tier, a port to the same end of another
link of its tier, a GPU to another GPU, a cooling loop or a switch (of its tier) to another. A place
named by two faults moves to one new place, two places never move to the same one, faults on two
links (a link, a port's) never move onto one, and a place never stays where it was while its kind has
another. Pathologies
keep their places, and recorded captures are skipped. With ``--realistic`` every scenario that has
faults runs in the realistic fleet mix, beside any pathologies of its own (fabricwatch/realistic.py: skewed
clocks, lost and late scrapes, switches at 30/60 s, DOM offsets, a second vendor, spare ports, a
duplicated leaf, bursty traffic, coolant drift, collector profiles...), drawn from its own seed: the
same faults in another mix. With ``--vary`` each fault also gets another strength and time
(:func:`vary_faults`): its magnitude × 0.85-1.5 (a fault at most 15 % milder than the library's, never
below a definition's floor: CorrOpt's 1e-8 frame loss is what "corrupting" means), its start moved by
up to 15 s either way and its ramp × 0.75-1.25, so that no detector is right only at the library's own
numbers. Build and score the copy with:

    .venv/bin/python -m bench.library_variant OUT --seed-offset 31337 --move-faults [--realistic] [--vary]
    .venv/bin/python -m fabricwatch.app.library OUT
    .venv/bin/fabricwatch score --library OUT
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabricwatch.faults import CAUSES
from fabricwatch.topology import Topology, generate

LIBRARY = Path(__file__).resolve().parents[1] / "replay" / "library"


def move_faults(faults: list[dict[str, Any]], topo: Topology, rng: random.Random) -> dict[str, str]:
    """Move each fault's place in place (see the module's docstring); returns old place → new."""
    end_of = {end: (link, side) for link in topo.links for end, side in ((link.a, "a"), (link.b, "b"))}
    link_of = {place: link.id for link in topo.links for place in (link.id, link.a, link.b)}
    moved: dict[str, str] = {}
    stands_for: dict[str, str | None] = {}  # a link a moved place is on -> the link its old place was on

    def pick(old: str, pool: list[str]) -> str:
        if old not in moved:
            was = link_of.get(old)
            free = [p for p in pool if p != old and p not in moved.values()
                    and stands_for.get(link_of.get(p, ""), was) == was]  # fmt: skip
            moved[old] = rng.choice(free) if free else old
            if moved[old] in link_of:
                stands_for[link_of[moved[old]]] = was
        return moved[old]

    for fault in faults:
        if "link" in fault:
            tier = topo.link_by_id[fault["link"]].tier
            fault["link"] = pick(fault["link"], [x.id for x in topo.links if x.tier == tier])
        if "port" in fault:
            link, side = end_of[fault["port"]]
            fault["port"] = pick(fault["port"], [getattr(x, side) for x in topo.links if x.tier == link.tier])
        if "gpu" in fault:
            fault["gpu"] = pick(fault["gpu"], list(topo.gpus))
        if "cooling_loop" in fault:
            fault["cooling_loop"] = pick(fault["cooling_loop"], list(topo.cooling_loops))
        if "switch" in fault:
            tier = topo.switch_by_name[fault["switch"]].tier
            fault["switch"] = pick(fault["switch"], [s.name for s in topo.switches if s.tier == tier])
    return moved


# a fault's strength, and how a factor applies to it: "scale" (the value × f), "excess" (an offered load:
# its part above line rate × f), "share" (a fraction: × f, at most 1), "floor" (× f, never below the
# value: the scenario's value is a definition's threshold, as CorrOpt's 1e-8 frame loss)
MAGNITUDES = {"loss_db": "scale", "drop_db": "scale", "delta_c": "scale", "ber": "scale", "load": "excess",
              "paused": "share", "ports_fraction": "share", "coupling": "share", "frame_loss": "floor"}  # fmt: skip
MODE_ONLY = {"frame_loss": "corrupt", "ber": "errors"}  # transceiver_fault options that apply in one mode
STRENGTH = (0.85, 1.5)
START_SHIFT_S = 15.0
RAMP = (0.75, 1.25)


def vary_faults(faults: list[dict[str, Any]], duration: float, rng: random.Random) -> list[str]:
    """Give each fault another strength and start (see the module's docstring), in place; returns
    what changed, for the scenario's description."""
    notes = []
    for fault in faults:
        cause = CAUSES[fault["cause"]]
        mode = fault.get("mode", cause.options.get("mode"))
        for name, how in MAGNITUDES.items():
            if name not in cause.options or (fault["cause"] == "transceiver_fault" and MODE_ONLY.get(name) != mode):
                continue
            value = float(fault.get(name, cause.options[name]))
            f = rng.uniform(*STRENGTH)
            if how == "floor":
                f = max(f, 1.0)
            new = {"scale": value * f, "floor": value * f, "share": min(1.0, value * f),
                   "excess": 1.0 + (value - 1.0) * f}[how]  # fmt: skip
            fault[name] = float(f"{new:.3g}")
            notes.append(f"{name} {value:g}->{fault[name]:g}")
        start = float(fault.get("start", 0.0))
        shift = rng.uniform(-START_SHIFT_S, START_SHIFT_S)
        moved = max(10.0, start + shift)
        if moved > start and moved > duration - 60.0:  # never later into the scenario's last minute
            moved = start
        if "end" in fault:
            fault["end"] = round(float(fault["end"]) + moved - start, 1)
        fault["start"] = round(moved, 1)
        if float(fault.get("ramp") or 0.0) > 0:
            fault["ramp"] = round(float(fault["ramp"]) * rng.uniform(*RAMP), 1)
        notes.append(f"start {start:g}->{fault['start']:g}")
    return notes


def in_the_mix(pathologies: object) -> bool:
    """Whether a scenario's ``pathologies`` already hold the realistic mix (alone, or in a list)."""
    return pathologies == "realistic" or (isinstance(pathologies, list) and "realistic" in pathologies)


def variant(source: Path, out: Path, seed_offset: int, move: bool, mix: bool = False, vary: bool = False) -> int:
    """Write the variant of every simulated scenario of ``source`` into ``out``; returns how many."""
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for path in sorted(source.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if data.get("recorded"):
            continue
        data["seed"] = int(data.get("seed", 0)) + seed_offset
        if move and data.get("faults"):
            shape = data["topology"]
            topo = generate(shape["gpus"], shape.get("rails", 8), shape.get("gpus_per_node", 8))
            moved = move_faults(data["faults"], topo, random.Random(f"{path.name}:{seed_offset}"))
            where = ", ".join(f"{a} -> {b}" for a, b in moved.items())
            data["description"] = f"{data.get('description', '')} [moved: {where}]"
        if vary and data.get("faults"):
            rng = random.Random(f"{path.name}:{seed_offset}:vary")
            notes = vary_faults(data["faults"], float(data.get("duration", 300)), rng)
            data["description"] = f"{data.get('description', '')} [varied: {', '.join(notes)}]"
        if mix and data.get("faults") and not in_the_mix(data.get("pathologies")):
            own = data.get("pathologies") or []  # a scenario's own pathologies stay, inside the mix
            data["pathologies"] = ["realistic", *own] if own else "realistic"
            data["description"] = f"{data.get('description', '')} [in the realistic fleet mix]"
        (out / path.name).write_text(yaml.safe_dump(data, sort_keys=False))
        written += 1
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--library", type=Path, default=LIBRARY)
    parser.add_argument("--seed-offset", type=int, default=7919)
    parser.add_argument("--move-faults", action="store_true")
    parser.add_argument("--realistic", action="store_true", help="scenarios with faults run in the realistic mix")
    parser.add_argument("--vary", action="store_true", help="each fault at another strength and start")
    args = parser.parse_args(argv)
    written = variant(args.library, args.out, args.seed_offset, args.move_faults, args.realistic, args.vary)
    print(f"{written} scenarios -> {args.out}")


if __name__ == "__main__":
    main()
