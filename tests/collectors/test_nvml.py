"""The nvml source against a fake of the library (recorded readings), and on this GPU-less host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fabricwatch import schema
from fabricwatch.collectors import nvidia_smi
from fabricwatch.collectors.fetch import PartialScrape
from fabricwatch.collectors.nvml import NvmlReader, NvmlSource
from fabricwatch.errors import InputError
from tests.collectors.fake_pynvml import A100, T4, FakeNvml
from tests.conftest import GOLDEN

TS = 1764400000.0


def rows(messages: list[schema.Message]) -> list[dict]:
    (m,) = messages
    assert schema.to_table("gpu", [m]).rejected == []
    return [dict(zip(m.rows, values, strict=True)) for values in zip(*m.rows.values(), strict=True)]


def test_recorded_readings_become_gpu_rows():
    reader = NvmlReader(FakeNvml([A100, T4]), "node007")
    a100, t4 = rows(reader.read(TS))
    assert a100 == {
        "device": "node007/gpu0",
        "util_pct": None,  # NOT_SUPPORTED under MIG: null, not 0
        "mem_util_pct": None,
        "temp_c": 27.0,
        "mem_temp_c": 44.0,
        "power_w": 67.03,  # NVML reports mW
        "power_limit_w": 500.0,
        "sm_clock_mhz": 1275.0,
        "throttle_mask": 0,
        "xid": 0,
        "ecc_dbe_total": 0,
        "pcie_replay_total": 0,
    }
    assert t4["mem_temp_c"] is None and t4["util_pct"] == 0.0 and t4["power_w"] == 26.78


@pytest.mark.parametrize(("xml", "gpu"), [("a100-sxm4-v12.xml", A100), ("tesla-t4.xml", T4)])
def test_nvml_and_nvidia_smi_agree_on_the_same_gpu(xml, gpu):
    """nvidia-smi prints NVML's values: both sources must make the same row (nvidia-smi has no XID)."""
    text = (GOLDEN / "nvidia-smi" / xml.removesuffix(".xml") / "nvidia-smi-q-x.xml").read_text()
    (smi,) = rows(nvidia_smi.parse_xml(text, "node007", TS))
    (nvml,) = rows(NvmlReader(FakeNvml([gpu]), "node007").read(TS))
    assert smi.pop("xid") is None and nvml.pop("xid") == 0
    assert smi == nvml


def test_xid_events_are_drained_and_the_last_one_kept():
    fake = FakeNvml([A100, T4])
    reader = NvmlReader(fake, "node007")
    fake.xid(1, 48)  # double-bit ECC
    fake.xid(1, 79)  # fallen off the bus: the last one wins
    assert [r["xid"] for r in rows(reader.read(TS))] == [0, 79]
    assert [r["xid"] for r in rows(reader.read(TS + 5))] == [0, 79]  # "last XID", not "XIDs in this scrape"


def test_without_event_support_xid_is_null():
    reader = NvmlReader(FakeNvml([T4], events=False), "node007")
    assert rows(reader.read(TS))[0]["xid"] is None


def test_a_lost_gpu_keeps_its_row_and_fails_the_scrape():
    lost = dict(T4, temperature="NVML_ERROR_GPU_IS_LOST")
    reader = NvmlReader(FakeNvml([A100, lost]), "node007")
    with pytest.raises(PartialScrape) as info:
        reader.read(TS)
    assert info.value.reason == "no_device" and "node007/gpu1" in str(info.value)
    a100, gone = rows(info.value.messages)
    assert a100["temp_c"] == 27.0
    assert gone["device"] == "node007/gpu1" and gone["temp_c"] is None and gone["power_w"] is None


def test_no_driver_is_one_clear_error():
    with pytest.raises(InputError, match="no NVIDIA driver"):
        NvmlReader(FakeNvml([], init_error="NVML_ERROR_LIBRARY_NOT_FOUND"), "node007")


def test_missing_bindings_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(InputError, match="nvidia-ml-py is not installed"):
        NvmlSource.build(NvmlSource.Config(host="node007"))


def test_collect_on_this_host_without_driver_exits_2(fw):
    """This machine has no GPU: the real library cannot start, and collect says so and exits 2."""
    code, out, err = fw("collect", "--source", "nvml", "--interval", "1", "--duration", "1")
    assert code == 2 and out == b""
    assert len(err.strip().splitlines()) == 1 and "NVML" in err


def test_nvml_has_no_saved_output(fw, tmp_path: Path):
    (tmp_path / "x").write_text("")
    code, _, err = fw("parse", "--source", "nvml", str(tmp_path / "x"))
    assert code == 2 and "nvidia-smi" in err
