"""The runbook library loads, covers every cause, and a bad runbook file is one clear line each."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.errors import InputErrors
from fabricwatch.faults import CAUSES
from fabricwatch.runbooks.loader import LIBRARY, load_library, load_runbook
from fabricwatch.topology import Topology

GOOD = """name: {name}
trigger: {{type: link_degradation, cause: connector_contamination}}
takes_out: link
steps:
  - act: shut
    template: gnmic-port-down
"""


def test_every_cause_names_a_runbook_of_the_library() -> None:
    books = load_library()
    assert {c.runbook for c in CAUSES.values()} <= set(books)
    # the seeds' two and the silent collector beside the eleven of the causes
    assert {"reroute", "throttle-hot-gpu", "collector-silent"} <= set(books)
    assert len(books) == 14
    for name, rb in books.items():
        assert rb.name == name and Path(rb.path).parent == LIBRARY
        if rb.takes_out != "none":
            # a device taken out of service never returns unchecked
            assert rb.return_to_service is None or rb.validation is not None, name


def test_each_cause_runbook_answers_its_cause() -> None:
    books = load_library()
    for cause in CAUSES.values():
        trigger = books[cause.runbook].trigger
        assert cause.incident_type in trigger.types and cause.name in trigger.causes, cause.name


def test_gpu_runbooks_validate_with_dcgm_diag_as_an_argv_list() -> None:
    rb = load_library()["drain-gpu"]
    assert rb.validation is not None and rb.validation.action is not None
    assert rb.validation.action.argv == ("dcgmi", "diag", "-r", "1")


# one row per mistake: the text replaced, what the error line must say, and the line it names
BAD = [
    ("takes_out: link", "takes_out: lnk", "takes_out: 'lnk' is not one of", 1),
    ("template: gnmic-port-down", "template: gnmic-port-dwn", "unknown template 'gnmic-port-dwn'", 5),
    ("template: gnmic-port-down", "argv: ['{switch}', down]", "the executable must be a literal", 5),
    ("template: gnmic-port-down", "argv: [gnmic, '{swtich}']", "unknown placeholder {swtich}", 5),
    ("template: gnmic-port-down", "template: gnmic-port-down\n    colour: red", "unknown key 'colour'", 5),
    ("  - act: shut\n", "  - diagnose: q\n    sql: SELECT * FROM port WHERE port = '{port}'\n  - act: shut\n",
     "use $name parameters", 5),
    ("  - act: shut\n", "  - diagnose: q\n    sql: SELECT $nope\n  - act: shut\n", "unknown parameter $nope", 5),
    ("cause: connector_contamination", "cause: dust", "trigger.cause: 'dust' is not valid", 2),
    ("  - act: shut\n", "  - verify: v\n    condition: {kind: port, metric: nope, of: ports, op: '<', value: 1}\n"
     "  - act: shut\n", "'nope' is not a column of port", 6),
    ("  - act: shut\n", "  - verify: v\n    condition: {kind: port, metric: state, on: ports, op: '<', value: 1}\n"
     "  - act: shut\n", "unknown key True", 6),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "says", "line"), BAD, ids=[b[2][:30] for b in BAD])
def test_a_bad_runbook_names_file_line_and_problem(tmp_path: Path, old: str, new: str, says: str, line: int) -> None:
    path = tmp_path / "bad.yaml"
    text = GOOD.format(name="bad")
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(InputErrors) as err:
        load_runbook(path)
    first = [e for e in err.value.errors if says in e.message]
    assert first, str(err.value)
    assert first[0].place == f"{path}:{line}"


def test_a_good_runbook_loads_and_a_site_folder_adds_to_the_library(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(GOOD.format(name="mine"))
    books = load_library(tmp_path)
    assert "mine" in books and "clean-connector" in books
    (tmp_path / "other.yaml").write_text(GOOD.format(name="mine"))
    with pytest.raises(InputErrors, match="must match the file name"):
        load_library(tmp_path)


def test_every_ready_template_renders_for_the_incident_it_is_made_for(topo128: Topology) -> None:
    from fabricwatch.runbooks.render import render
    from fabricwatch.runbooks.targets import resolve
    from fabricwatch.runbooks.templates import TEMPLATES
    from tests.runbooks.support import incident

    gpu = resolve(
        incident("inc-1", "gpu_xid", "gpu", "node001/gpu3", "drain-gpu"), topo128, "node",
        {"cap_fraction": 0.8, "clock_cap_mhz": 1200}, power_limit=lambda g: 700.0,
    )  # fmt: skip
    link = resolve(incident("inc-2", "link_down", "link", "L00011", "check-link"), topo128, "link", {})
    rendered = {}
    for name, argv in TEMPLATES.items():
        values = link.values if name.startswith("gnmic") else gpu.values
        rendered[name] = [render(a, values) for a in argv]
    assert rendered["slurm-drain"] == ["scontrol", "update", "NodeName=node001", "State=DRAIN",
                                       "Reason=fabricwatch inc-1 gpu_xid"]  # fmt: skip
    assert rendered["slurm-resume"] == ["scontrol", "update", "NodeName=node001", "State=RESUME"]
    assert rendered["kubectl-cordon"] == ["kubectl", "cordon", "node001"]
    assert rendered["kubectl-uncordon"] == ["kubectl", "uncordon", "node001"]
    assert rendered["ip-link-down"] == ["ip", "link", "set", "dev", "rdma3", "down"]
    assert rendered["nvidia-smi-power-cap"] == ["nvidia-smi", "-i", "3", "-pl", "560"]
    assert rendered["nvidia-smi-power-restore"] == ["nvidia-smi", "-i", "3", "-pl", "700"]
    host_end = topo128.link_by_id["L00011"].b  # the leaf end of a host link
    number = int(host_end.rsplit(":p", 1)[1])
    assert rendered["gnmic-port-down"][2] == host_end.split(":")[0]
    assert f"/interfaces/interface[name=Ethernet{number}]/config/enabled" in rendered["gnmic-port-down"]
    assert rendered["gnmic-port-up"][-1] == "true" and rendered["gnmic-port-down"][-1] == "false"
