"""Sources running real commands: argv lists, timeouts, missing tools, partial failures.

The tools are stand-in scripts that print saved outputs, so the whole path (argv → subprocess with a
timeout → parser → messages) runs without ethtool hardware, a switch or a GPU.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fabricwatch import schema, topology
from fabricwatch.cli.collect import fault_domain_keyer
from fabricwatch.collectors.ethtool import EthtoolSource
from fabricwatch.collectors.fetch import PartialScrape, ScrapeError
from fabricwatch.collectors.gnmi import GnmiSource
from fabricwatch.collectors.nvidia_smi import NvidiaSmiSource
from fabricwatch.collectors.toolsource import Options, ToolSource
from fabricwatch.collectors.values import message
from tests.conftest import GOLDEN

TS = 1764400000.0
ETHTOOL = GOLDEN / "ethtool"


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_ethtool(tmp_path: Path) -> Path:
    """ethtool: eth2 has a CMIS module; eth3's cage is empty (ethtool -m fails as the real one does)."""
    return script(
        tmp_path,
        "ethtool",
        f"""echo "$@" >> {tmp_path}/calls
case "$*" in
  "-m eth2") cat {ETHTOOL}/cmis-qsfpdd-400g-dr4/ethtool-m.txt ;;
  "-m eth3") echo "netlink error: Input/output error" >&2; exit 1 ;;
  "-S "*) cat {ETHTOOL}/mlx5-stats/ethtool-S.txt ;;
  *) sed "s/ens1f0np0/$1/" {ETHTOOL}/link-settings/ethtool.txt ;;
esac
""",
    )


def opts(cls: type[ToolSource], **options) -> Options:
    return Options.from_config(cls.Config(host="node007", timeout_s=5.0, **options))


def test_ethtool_runs_three_commands_per_interface_and_keeps_what_it_read(tmp_path):
    tool = fake_ethtool(tmp_path)
    source = EthtoolSource(opts(EthtoolSource, iface=("eth2", "eth3"), ethtool=str(tool)))
    with pytest.raises(PartialScrape) as info:
        source.scrape(TS)
    assert info.value.reason == "exit_status" and "ethtool -m eth3" in str(info.value)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["-m eth2", "-S eth2", "eth2", "-m eth3", "-S eth3", "eth3"]  # argv, never a shell line
    by_kind = {m.kind: m for m in info.value.messages}
    assert by_kind["optical"].rows["port"] == ["node007/eth2:p0"] * 4  # 8 printed CMIS lanes, 4 used
    assert by_kind["port"].rows["port"] == ["node007/eth2:p0", "node007/eth3:p0"]
    assert by_kind["port"].rows["state"] == [1, 1] and by_kind["port"].rows["rx_crc_errors_total"] == [12, 12]
    for m in info.value.messages:
        assert schema.to_table(m.kind, [m]).rejected == []


def test_a_tool_that_hangs_is_a_timeout(tmp_path):
    tool = script(tmp_path, "nvidia-smi", "sleep 5\n")
    source = NvidiaSmiSource.build(NvidiaSmiSource.Config(host="node007", timeout_s=0.2, nvidia_smi=str(tool)))
    with pytest.raises(ScrapeError) as info:
        source.scrape(TS)
    assert info.value.reason == "timeout" and "0.2s" in str(info.value)


def test_a_missing_tool_is_missing_tool(tmp_path):
    source = NvidiaSmiSource.build(NvidiaSmiSource.Config(host="node007", nvidia_smi=str(tmp_path / "absent")))
    with pytest.raises(ScrapeError) as info:
        source.scrape(TS)
    assert info.value.reason == "missing_tool"


def test_gnmi_runs_gnmic_get_without_secrets_on_the_command_line(tmp_path, monkeypatch):
    fixture = GOLDEN / "gnmi" / "openconfig-gnmic-get" / "gnmic-get.json"
    tool = script(tmp_path, "gnmic", f'printf "%s\\n" "$@" > {tmp_path}/argv\ncat {fixture}\n')
    monkeypatch.setenv("GNMIC_PASSWORD", "s3cret")  # gnmic reads it itself
    source = GnmiSource(
        opts(GnmiSource, target="leaf1-0:6030", gnmic=str(tool), skip_verify=True, port_style="generic")
    )
    kinds = [m.kind for m in source.scrape(TS)]
    argv = (tmp_path / "argv").read_text().split()
    assert argv[:5] == ["-a", "leaf1-0:6030", "--format", "json", "--skip-verify"]
    assert argv[5:] == ["get", "--path", "/interfaces", "--path", "/components", "--path", "/qos/interfaces"]
    assert "s3cret" not in " ".join(argv)
    assert kinds == ["optical", "port"]


def test_fault_domain_keys_put_both_ends_of_a_host_link_together(tmp_path, topo128):
    path = tmp_path / "cluster.yaml"
    path.write_text(topo128.to_yaml())
    keyer = fault_domain_keyer(path)
    gpu_port, leaf_port = next(iter(topology.iter_gpu_ports(topo128)))[1], None
    link = topo128.port_link[gpu_port]
    leaf_port = link.b if link.a == gpu_port else link.a
    host = gpu_port.split("/")[0]
    m = message("port", host, TS, [{"port": gpu_port}, {"port": f"{host}/eth9:p0"}])
    parts = dict(keyer(m))
    leaf = leaf_port.split(":")[0]
    assert set(parts) == {leaf, host}  # the NIC port goes with its leaf; an unknown port stays with its host
    assert parts[leaf].rows["port"] == [gpu_port]
    assert dict(keyer(message("port", leaf, TS, [{"port": leaf_port}])))[leaf].rows["port"] == [leaf_port]


def test_source_options_are_added_only_for_the_chosen_source(fw):
    with pytest.raises(SystemExit):
        fw("collect", "--source", "dcgm", "--iface", "eth2")  # --iface belongs to ethtool, not dcgm
    code, _, err = fw("parse", "--source", "ethtool", os.devnull, "--iface", "eth2")
    assert code == 2 and "empty output" in err  # the option was accepted for ethtool
