"""Bad input: one clear line naming the source and the file, exit status 2, no traceback, no rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.collectors.conftest import jsonl
from tests.conftest import GOLDEN

A100 = (GOLDEN / "nvidia-smi" / "a100-sxm4-v12" / "nvidia-smi-q-x.xml").read_text()

CASES = [
    # (source, file content, extra args, words the error line must hold)
    ("nvidia-smi", A100[:3000], [], ["not valid XML"]),  # truncated XML
    ("nvidia-smi", "", [], ["empty output"]),
    ("nvidia-smi", "<html><body>502</body></html>", [], ["expected <nvidia_smi_log>"]),
    ("dcgm", "", [], ["empty page"]),
    ("dcgm", "<html>login</html>\n", [], ["not Prometheus text format"]),
    ("dcgm", "node_cpu_seconds_total 12\n", [], ["no DCGM_FI_* metrics"]),  # the wrong exporter
    ("ethtool", "{not json", ["--iface", "eth2"], ["not JSON"]),
    ("ethtool", "", ["--iface", "eth2"], ["empty output"]),
    ("ethtool", "Cannot get module EEPROM information: Input/output error\n", ["--iface", "eth2"], ["no 'Identifier'"]),
    ("ethtool", '[{"ifname": "eth2"}]', ["--iface", "eth2"], ["no 'identifier' field"]),
    ("ethtool", "\tIdentifier : 0x03 (SFP)\n", [], ["give --iface"]),  # -m output does not name its port
    ("gnmi", "", [], ["empty input"]),
    ("gnmi", "{garbage", [], ["not JSON"]),
    ("gnmi", '{"hello": "world"}', [], ["not gNMI notifications"]),
    ("switchcli", "% Invalid input detected at '^' marker.\n", [], ["not an EOS or NX-OS"]),
    ("ibtools", "ibwarn: [12345] mad_rpc_open_port: can't open UMAD port\n", [], ["not perfquery -x nor ibswinfo"]),
]


@pytest.mark.parametrize(
    ("source", "content", "args", "words"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_bad_file_is_one_line_naming_source_and_file(fw, tmp_path: Path, source, content, args, words):
    path = tmp_path / "output.txt"
    path.write_text(content)
    code, out, err = fw("parse", "--source", source, str(path), *args)
    assert code == 2 and out == b""
    assert len(err.strip().splitlines()) == 1, err
    assert source in err and str(path) in err, err
    for word in words:
        assert word in err


def test_missing_sysfs_folder(fw, tmp_path: Path):
    code, out, err = fw("parse", "--source", "sysfs", str(tmp_path / "no-such-root"))
    assert code == 2 and out == b"" and "no such file or folder" in err


def test_sysfs_folder_without_class_dirs(fw, tmp_path: Path):
    (tmp_path / "etc").mkdir()
    code, _, err = fw("parse", "--source", "sysfs", str(tmp_path))
    assert code == 2 and "no class/infiniband or class/net" in err and len(err.strip().splitlines()) == 1


def test_unknown_source_is_one_line(fw, tmp_path: Path):
    with pytest.raises(SystemExit) as info:
        fw("parse", "--source", "snmp", str(tmp_path))
    assert info.value.code == 2


def test_collect_keeps_going_on_a_bad_file_and_counts_the_failures(fw, tmp_path: Path):
    """--file re-read each scrape: an unparseable output fails every scrape, the loop does not die."""
    bad = tmp_path / "nvidia-smi.xml"
    bad.write_text(A100[:3000])
    code, out, err = fw(
        "collect", "--source", "nvidia-smi", "--file", str(bad), "--interval", "0.05", "--duration", "0.5"
    )
    assert code == 0 and out == b""
    lines = err.strip().splitlines()
    assert "not valid XML" in lines[0] and "[unparseable]" in lines[0]
    assert sum("not valid XML" in line for line in lines) == 1  # said once, not once per scrape
    scrapes, failed = (int(n) for n in re.search(r"(\d+) scrapes, (\d+) failed", lines[-1]).groups())
    assert scrapes >= 2 and failed == scrapes


def test_collect_reads_a_saved_file_and_numbers_messages(fw):
    xml = GOLDEN / "nvidia-smi" / "dual_a5000-v13" / "nvidia-smi-q-x.xml"
    code, out, err = fw(
        "collect",
        "--source",
        "nvidia-smi",
        "--host",
        "node007",
        "--file",
        str(xml),
        "--interval",
        "0.1",
        "--duration",
        "0.5",
    )
    assert code == 0, err

    lines = jsonl(out)
    assert len(lines) >= 2 and [m["seq"] for m in lines] == list(range(len(lines)))
    assert lines[0]["rows"]["device"] == ["node007/gpu0", "node007/gpu1"]


def test_collect_without_the_tool_counts_missing_tool(fw, tmp_path: Path):
    code, out, err = fw(
        "collect",
        "--source",
        "nvidia-smi",
        "--nvidia-smi",
        str(tmp_path / "nvidia-smi"),
        "--interval",
        "0.01",
        "--duration",
        "0.03",
    )
    assert code == 0 and out == b""
    assert "not found" in err and "[missing_tool]" in err


def test_collect_with_kafka_missing_is_one_line(fw, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "fabricwatch.stream.kafka", None)
    xml = GOLDEN / "nvidia-smi" / "tesla-t4" / "nvidia-smi-q-x.xml"
    code, _, err = fw(
        "collect", "--source", "nvidia-smi", "--file", str(xml), "--bootstrap", "localhost:9092", "--duration", "1"
    )
    assert code == 2 and "--bootstrap" in err and len(err.strip().splitlines()) == 1
