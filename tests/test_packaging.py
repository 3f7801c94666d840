"""One import namespace: the stage folders at the repository root install as fabricwatch.<stage>.

The wheel is built and installed into a fresh virtualenv outside the checkout, where the demo must
run: that is what a user who pip-installs fabricwatch gets, with no repository on the path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("collectors", "stream", "detectors", "replay", "runbooks", "dashboards")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed_and_mapped() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    package_dir = setuptools["package-dir"]
    found = set()
    for top in ("fabricwatch", *STAGES):
        base = ROOT / top
        for init in base.rglob("__init__.py") if base.is_dir() else ():
            rel = init.parent.relative_to(ROOT).parts
            name = ".".join(rel) if top == "fabricwatch" else ".".join(("fabricwatch", *rel))
            found.add(name)
            assert top == "fabricwatch" or package_dir.get(f"fabricwatch.{top}") == top, name
    assert found == listed


def test_no_top_level_stage_import_anywhere() -> None:
    """A bare ``import stream`` would load a second copy of a module (ruff TID251 checks it too)."""
    offenders = []
    for path in ROOT.rglob("*.py"):
        if {".venv", ".cache", "build"} & set(path.parts):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            words = line.strip().split()
            if len(words) >= 2 and words[0] in ("import", "from") and words[1].split(".")[0] in STAGES:
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_wheel_installs_one_package_and_runs_the_demo(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    leftovers = [ROOT / "build", ROOT / "fabricwatch.egg-info"]
    existed = {p for p in leftovers if p.exists()}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        check=True,
        timeout=300,
    )
    for p in set(leftovers) - existed:  # setuptools builds in the tree; leave it as it was
        shutil.rmtree(p, ignore_errors=True)
    (wheel,) = dist.glob("fabricwatch-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        tops = {name.split("/")[0] for name in zf.namelist() if not name.split("/")[0].endswith(".dist-info")}
        names = set(zf.namelist())
    assert tops == {"fabricwatch"}
    for stage in ("collectors", "collectors/sim", "stream", "detectors", "replay", "runbooks"):
        assert f"fabricwatch/{stage}/__init__.py" in names
    library = {n.rsplit("/", 1)[1] for n in names if n.startswith("fabricwatch/runbooks/library/")}
    assert library == {p.name for p in (ROOT / "runbooks" / "library").glob("*.yaml")} and len(library) == 14

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=400)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [env_dir / "bin" / "fabricwatch", "demo", "--gpus", "64", "--db", str(work / "demo.duckdb")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = subprocess.run(
        [py, "-c", "import fabricwatch.stream.bus as m; print(m.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert str(env_dir) in imported and str(ROOT) not in imported
    # it wrote only where it was told: nothing beside its own files, nothing else in the working folder
    assert all(p.name.startswith("demo.duckdb") for p in work.iterdir())
    assert not list((env_dir / "lib").rglob("*.duckdb"))
