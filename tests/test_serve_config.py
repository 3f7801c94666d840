"""``fabricwatch serve`` config: the engine: and detectors: sections reach the detection engine, and
a bad detector setting is one line naming file:line and the key path (the rest: tests/kafka/test_cli.py)."""

from __future__ import annotations

import pytest

from fabricwatch.cli.serve import load_config
from fabricwatch.detectors.base import DETECTORS
from fabricwatch.detectors.engine import DetectionEngine
from fabricwatch.errors import InputError
from fabricwatch.topology import generate

BASE = "bootstrap: h:9092\ndb: a.duckdb\n"


def test_detectors_are_enabled_disabled_and_tuned_from_the_file(tmp_path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(
        BASE + "engine:\n  window_s: 120\n  every_s: 5\n"
        "detectors:\n  pfc_storm: {enabled: false}\n  gpu_temp: {gpu_hot_c: 83}\n  gpu_xid:\n    xid_ignore: [13, 31]\n"
    )
    config = load_config(path)
    settings = config.process
    assert (settings.db, config.listen, config.port) == (tmp_path / "a.duckdb", "127.0.0.1", 9108)
    engine = DetectionEngine(generate(64, 8, 8), settings.engine)
    by_name = {d.name: d for d in engine.detectors}
    assert (engine.window_s, engine.every_s) == (120.0, 5.0)
    assert "pfc_storm" not in by_name and "congestion" in by_name
    assert by_name["gpu_temp"].config.gpu_hot_c == 83.0
    assert by_name["gpu_xid"].config.xid_ignore == (13, 31)


def test_without_sections_every_detector_runs_with_its_defaults(tmp_path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(BASE + "detectors:\n")
    settings = load_config(path).process
    engine = DetectionEngine(generate(64, 8, 8), settings.engine)
    assert all(d.config == type(d).Config() for d in engine.detectors)
    assert sorted(d.name for d in engine.detectors) == sorted(DETECTORS)  # 13 with liveness


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a misspelt threshold names its detector and line
        ("detectors:\n  gpu_temp:\n    gpu_hot: 83\n", ":5: detectors.gpu_temp.gpu_hot: unknown key (known: enabled, "),
        # a detector that does not exist
        ("detectors:\n  gpu_tmep: {enabled: false}\n", ":4: detectors.gpu_tmep: unknown key (known: congestion, "),
        # a wrong type
        ("detectors:\n  packet_loss: {loss_ratio: lots}\n", ":4: detectors.packet_loss.loss_ratio: must be a number"),
        # an engine setting out of range, and one across settings
        ("engine:\n  every_s: 0\n", ":4: engine.every_s: must be a number > 0, not 0"),
        ("engine:\n  recent_s: 90\n", ":3: engine: recent_s (90) must not exceed window_s (60)"),
    ],
)
def test_bad_detection_settings_are_one_line_with_file_and_line(tmp_path, text: str, expected: str) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(BASE + text)
    with pytest.raises(InputError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}{expected}") and "\n" not in str(err.value)
