"""The one YAML loader: lines are kept, and typed conversion reports every problem as file:line: key."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest

from fabricwatch import faults, yamlconf
from fabricwatch.errors import InputError
from fabricwatch.topology import generate


class Inner(yamlconf.Config):
    port: Annotated[int, msgspec.Meta(ge=0, le=65_535)] = 9108
    names: tuple[str, ...] = ()


class Outer(yamlconf.Config):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    ratio: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    inner: Inner = msgspec.field(default_factory=Inner)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ratio > 10 and self.inner.port == 0:
            raise ValueError("a ratio over 10 needs a port")


def convert(tmp_path, text: str) -> Outer:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return yamlconf.convert(yamlconf.load(path), Outer, str(path))


def test_lines_of_mappings_keys_and_items(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("# a comment\nname: x\ninner:\n  names:\n    - a\n    - b\n")
    data = yamlconf.load(path)
    assert (yamlconf.line_of(data), yamlconf.line_of(data, "inner"), yamlconf.line_of(data["inner"], "names")) == (
        2,
        3,
        4,
    )
    assert [yamlconf.line_of(data["inner"]["names"], i) for i in range(2)] == [5, 6]
    assert data == {"name": "x", "inner": {"names": ["a", "b"]}}  # plain dicts and lists to everything else
    assert yamlconf.line_of({"plain": 1}) is None


def test_a_good_file_becomes_a_frozen_struct(tmp_path) -> None:
    got = convert(tmp_path, "name: x\nratio: 2\ninner: {port: 80, names: [a, b]}\n")
    assert got == Outer(name="x", ratio=2.0, inner=Inner(port=80, names=("a", "b")))
    with pytest.raises(AttributeError):
        got.name = "y"  # type: ignore[misc]


def test_every_problem_is_reported_with_its_line(tmp_path) -> None:
    with pytest.raises(InputError) as err:
        convert(tmp_path, "ratio: 0\nnmae: x\ninner:\n  port: 70000\n  names: [a, 3]\n")
    path = tmp_path / "c.yaml"
    assert str(err.value).splitlines() == [
        f"{path}:1: ratio: must be a number > 0, not 0",
        f"{path}:2: nmae: unknown key (known: name, ratio, inner)",
        f"{path}:4: inner.port: must be an integer from 0 to 65535, not 70000",
        f"{path}:5: inner.names: must be a list of strings",
        f"{path}:1: name: missing (required)",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\ninner: 5\n", ":2: inner: must be a mapping (port: ..., names: ...), not 5"),
        ("name: x\nratio: 20\ninner:\n  port: 0\n", ":1: a ratio over 10 needs a port"),  # across keys
        ("name: x\nratio: .inf\n", ":2: ratio: must be finite, not inf"),
        ("name: [x\n", ":2: invalid YAML"),
        ("name: ''\n", ":1: name: must be a non-empty string"),
    ],
)
def test_one_line_each(tmp_path, text: str, expected: str) -> None:
    with pytest.raises(InputError) as err:
        convert(tmp_path, text)
    assert str(err.value).startswith(f"{tmp_path / 'c.yaml'}{expected}") and "\n" not in str(err.value)


def test_an_empty_section_keeps_its_defaults(tmp_path) -> None:
    assert convert(tmp_path, "name: x\ninner:\n").inner == Inner()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("seed: 7\nfualts: []\n", ":2: fualts: unknown key (known: seed, faults, pathologies)"),
        ("seed: -1\n", ":1: seed: must be an integer ≥ 0, not -1"),
        ("faults: {cause: link_down}\n", ":1: faults: must be a list"),
        ("faults:\n  - {cause: link_down, link: L00001}\n  - {cause: link_down}\n", ":3: faults[1]: link_down"),
    ],
)
def test_fault_files_use_the_same_loader(tmp_path, text: str, expected: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        faults.load_plan(path, generate(64, 8, 8))
    assert str(err.value).startswith(f"{path}{expected}")
