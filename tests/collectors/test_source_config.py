"""Sources are built from a typed config (STYLE item 2): every option a source adds to ``collect`` is a
field of its frozen Config, and the command line is only turned into that config."""

from __future__ import annotations

import argparse

import msgspec
import pytest

from fabricwatch.cli.collect import build_source, config_from_args, make_parser
from fabricwatch.collectors.base import SOURCES, SourceConfig, source_class
from fabricwatch.collectors.sim.source import SimSource
from fabricwatch.collectors.toolsource import ToolSource
from fabricwatch.errors import InputError

NAMES = sorted(SOURCES)


def dests(name: str) -> set[str]:
    """The dests of the options ``collect --source NAME`` parses for the source itself."""
    sub = argparse.ArgumentParser().add_subparsers()
    p = make_parser(sub, "collect")
    common = {a.dest for a in p._actions} - {"help", "source"}
    cls = source_class(name)
    own = argparse.ArgumentParser(add_help=False)
    cls.add_arguments(own)
    mine = {a.dest for a in own._actions}
    return mine | (common if issubclass(cls, ToolSource) else set())


@pytest.mark.parametrize("name", NAMES)
def test_every_option_of_a_source_is_a_field_of_its_config(name: str) -> None:
    cls = source_class(name)
    assert issubclass(cls.Config, SourceConfig)
    fields = {f.name for f in msgspec.structs.fields(cls.Config)}
    assert dests(name) <= fields, f"{name}: options without a Config field: {sorted(dests(name) - fields)}"


@pytest.mark.parametrize("name", NAMES)
def test_config_is_frozen_and_rejects_unknown_keys(name: str) -> None:
    cls = source_class(name)
    config = cls.Config()
    with pytest.raises(AttributeError):
        config.x = 1  # type: ignore[attr-defined]
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({"no_such_option": 1}, cls.Config)


def test_the_command_line_becomes_the_typed_config() -> None:
    args = argparse.Namespace(
        source="ethtool", host="node007", port_map=None, timeout_s=2.5, file=None, iface=["eth2", "eth3"],
        ethtool="ethtool", module_json=True, no_stats=False, lanes=None, interval=5.0, bootstrap=None,
    )  # fmt: skip
    source = build_source(source_class("ethtool"), args)
    config = source.opts.config
    assert (config.iface, config.module_json, config.lanes, config.timeout_s) == (("eth2", "eth3"), True, None, 2.5)
    assert (source.opts.host, source.opts.host_given) == ("node007", True)


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        ("sim", {"seed": -1}, "--seed: must be an integer ≥ 0 or null, not -1"),
        ("ethtool", {"lanes": 0}, "--lanes: must be an integer ≥ 1 or null, not 0"),
        ("ibtools", {"node_type": "router"}, "--node-type: must be one of switch, ca"),
        ("gnmi", {"port_style": "odd"}, "port_style must be one of"),
    ],
)
def test_a_bad_option_is_one_line_naming_it(name: str, options: dict, expected: str) -> None:
    with pytest.raises(InputError) as err:
        config_from_args(source_class(name).Config, argparse.Namespace(**options))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_sim_source_is_built_from_its_config(tmp_path, topo128) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(topo128.to_yaml())
    source = SimSource.build(SimSource.Config(topology=path, seed=3, interval=10.0))
    kinds = {m.kind for m in source.scrape(1764400000.0)}
    assert {"gpu", "optical", "port"} <= kinds
    with pytest.raises(InputError, match="--topology"):
        SimSource.build(SimSource.Config())
