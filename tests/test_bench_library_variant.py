"""bench/library_variant.py: moved faults stay valid scenarios, each at another place of its kind."""

from __future__ import annotations

from pathlib import Path

import yaml

from bench.library_variant import LIBRARY, in_the_mix, variant
from fabricwatch.app.library import load_scenario


def test_every_fault_moves_to_another_place_of_its_kind_and_the_scenario_still_loads(tmp_path: Path) -> None:
    n = variant(LIBRARY, tmp_path, 31337, move=True)
    assert n >= 60
    moved = kept = 0
    for path in sorted(tmp_path.glob("*.yaml")):
        original = yaml.safe_load((LIBRARY / path.name).read_text())
        copy = yaml.safe_load(path.read_text())
        assert copy["seed"] == original.get("seed", 0) + 31337
        scenario = load_scenario(path)  # the project's own checks: every place exists in the topology
        for before, after in zip(original.get("faults") or [], copy.get("faults") or [], strict=True):
            assert before["cause"] == after["cause"]
            for key in ("link", "port", "gpu", "cooling_loop", "switch"):
                if key in before:
                    moved += before[key] != after[key]
                    kept += before[key] == after[key]
            if "link" in after:
                links = scenario.topology.link_by_id
                assert links[after["link"]].tier == links[before["link"]].tier
    assert moved >= 40 and kept == 0


def test_faults_on_different_links_never_move_onto_one_link(tmp_path: Path) -> None:
    """two-faults-one-leaf's dirty connector and failing transmitter are on two links ("another port"):
    moved, they must still be, or the copy is another scenario (two causes on one link)."""
    for offset in (90001, 4409, 31337):
        variant(LIBRARY, tmp_path / str(offset), offset, move=True)
        for path in sorted((tmp_path / str(offset)).glob("*.yaml")):
            original = yaml.safe_load((LIBRARY / path.name).read_text())
            copy = yaml.safe_load(path.read_text())
            port_link = load_scenario(path).topology.port_link
            before = _links(original.get("faults") or [], port_link)
            if len(set(before)) == len(before):
                after = _links(copy.get("faults") or [], port_link)
                assert len(set(after)) == len(after), f"{path.name} (+{offset}): {after}"


def _links(faults: list[dict], port_link: dict) -> list[str]:
    """The link each fault on a link or a port is on."""
    return [f["link"] if "link" in f else port_link[f["port"]].id for f in faults if "link" in f or "port" in f]


def test_realistic_puts_every_fault_scenario_in_the_fleet_mix_beside_its_own_pathologies(tmp_path: Path) -> None:
    variant(LIBRARY, tmp_path, 0, move=False, mix=True)
    alone = beside = 0
    for path in sorted(tmp_path.glob("*.yaml")):
        original = yaml.safe_load((LIBRARY / path.name).read_text())
        copy = yaml.safe_load(path.read_text())
        if not original.get("faults") or original.get("recorded") or in_the_mix(original.get("pathologies")):
            assert copy.get("pathologies") == original.get("pathologies")  # none, or in the mix already
            continue
        assert copy["faults"] == original["faults"]
        kinds = [p.kind for p in load_scenario(path).plan.pathologies]  # the mix for its own topology and seed
        assert "bursty_traffic" in kinds and "coolant_drift" in kinds
        own = original.get("pathologies") or []
        if own:
            assert copy["pathologies"] == ["realistic", *own]
            assert kinds[-len(own) :] == [p["kind"] for p in own]  # its own, after the mix's
            beside += 1
        else:
            assert copy["pathologies"] == "realistic"
            alone += 1
    assert alone >= 30 and beside >= 5


def test_vary_changes_each_faults_strength_and_start_within_bounds_and_the_scenario_still_loads(tmp_path: Path) -> None:
    from bench.library_variant import MAGNITUDES, START_SHIFT_S, STRENGTH

    variant(LIBRARY, tmp_path, 0, move=False, vary=True)
    stronger = milder = 0
    for path in sorted(tmp_path.glob("*.yaml")):
        original = yaml.safe_load((LIBRARY / path.name).read_text())
        copy = yaml.safe_load(path.read_text())
        if not original.get("faults") or original.get("recorded"):
            continue
        load_scenario(path)  # still a valid scenario (every option known, every value accepted)
        for before, after in zip(original["faults"], copy["faults"], strict=True):
            assert abs(after["start"] - before.get("start", 0)) <= START_SHIFT_S + 1e-9 and after["start"] >= 10
            for name in MAGNITUDES:
                if name in before and name in after:
                    ratio = after[name] / before[name]
                    if MAGNITUDES[name] == "floor":
                        assert ratio >= 1.0, f"{path.name}: {name} below the definition's floor"
                    elif MAGNITUDES[name] == "scale":
                        assert STRENGTH[0] - 0.01 <= ratio <= STRENGTH[1] + 0.01
                        stronger += ratio > 1
                        milder += ratio < 1
    assert stronger >= 5 and milder >= 2
