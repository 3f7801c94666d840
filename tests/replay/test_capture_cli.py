from __future__ import annotations

import json

from fabricwatch.cli import main
from fabricwatch.replay.capture import open_capture
from tests.replay.test_capture import _write


def test_info_cut_filter(tmp_path, capsys):
    src = tmp_path / "c.jsonl.gz"
    _write(src, n=10, truth=[{"cause": "gpu_thermal", "gpu": "node000/gpu0", "start": 3.0}])
    assert main(["capture", "info", str(src)]) == 0
    out = capsys.readouterr().out
    assert "records: 10 over 9 s" in out and "gpu_thermal" in out

    cut = tmp_path / "cut.jsonl"
    assert main(["capture", "cut", str(src), "--from", "2", "--to", "5", "--out", str(cut)]) == 0
    kept = list(open_capture(cut).records())
    assert [r.value["seq"] for r in kept] == [2, 3, 4, 5]
    assert open_capture(cut).truth == [{"cause": "gpu_thermal", "gpu": "node000/gpu0", "start": 3.0}]

    flt = tmp_path / "f.jsonl"
    assert main(["capture", "filter", str(src), "--kind", "port", "--out", str(flt)]) == 0
    assert list(open_capture(flt).records()) == []
    assert main(["capture", "filter", str(src), "--kind", "toaster", "--out", str(flt)]) == 2
    assert "unknown kind 'toaster'" in capsys.readouterr().err


def test_score_counts_hits_misses_and_false_alarms(tmp_path, capsys):
    src = tmp_path / "c.jsonl"
    _write(
        src,
        n=3,
        truth=[
            {"cause": "gpu_thermal", "gpu": "node000/gpu0", "start": 1.0},
            {"cause": "link_down", "link": "L00003", "start": 0.0},
        ],
    )
    t0 = 1764400000.0
    incidents = [
        {
            "id": "inc-0001",
            "type": "thermal",
            "cause": "gpu_thermal",
            "location": {"entity": "gpu", "id": "node000/gpu0"},
            "severity": "major",
            "first_seen": t0 + 1,
            "detected_at": t0 + 21,
        },
        {
            "id": "inc-0002",
            "type": "thermal",
            "cause": "cooling_failure",
            "location": {"entity": "cooling_loop", "id": "cl00"},
            "severity": "major",
            "first_seen": t0,
            "detected_at": t0 + 30,
        },
    ]
    path = tmp_path / "incidents.json"
    path.write_text(json.dumps(incidents))
    assert main(["score", str(path), "--truth", str(src), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["detected"] == 1 and result["recall"] == 0.5 and result["precision"] == 0.5
    assert result["false_alarms"] == ["inc-0002"]
    assert result["matches"][1]["latency_s"] == 20.0
    path.write_text("[{]")
    assert main(["score", str(path), "--truth", str(src)]) == 2
