"""What `./xpfo check` boots by default and what `--full` adds.

The default run (CI's) must stay within its time budget and still boot
every machine kind (machines.KINDS) and every mode (modes.ALL_MODES) at
least once, and run every attack test with its protection off (the attack
works) and on (it is stopped) somewhere; `--full` adds the tests marked
'full' and nothing else. Read from pytest's own collection, each
integration test's `boots` marker saying what it boots (tests/conftest.py).
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from conftest import ROOT
from harness import attacks, machines, modes

Tests = List[dict]


def _collect(out: Path, *args: str) -> Tests:
    env = dict(os.environ)
    env.pop("XPFO_SKIP_INTEGRATION", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                        "-p", "no:cacheprovider", f"--boots-json={out}", *args, "tests"],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def selections(tmp_path_factory) -> Dict[str, Tests]:
    d = tmp_path_factory.mktemp("selection")
    return {"default": _collect(d / "default.json"),
            "full": _collect(d / "full.json", "--full")}


def _boots(tests: Tests, suite: str = "") -> Set[Tuple[str, str, str, int]]:
    return {tuple(b) for t in tests for b in t["boots"] if not suite or b[0] == suite}


def test_every_boot_names_a_real_machine_kind_and_mode(selections):
    bad = [(t["test"], b) for t in selections["full"] for b in t["boots"]
           if b[1] not in machines.KINDS or (b[2] is not None and b[2] not in modes.ALL_MODES)]
    assert not bad, bad


def test_every_integration_test_that_takes_the_kernel_says_what_it_boots(selections):
    # a new test that boots the kernel without a `boots` marker would fall
    # out of the coverage checked below
    kernel_fixtures = {"kernel", "attack_runs", "flags_tree"}
    silent = [t["test"] for t in selections["full"]
              if t["integration"] and kernel_fixtures & set(t["fixtures"]) and not t["boots"]]
    assert not silent, silent


def test_default_boots_every_machine_kind_and_every_mode(selections):
    booted = _boots(selections["default"])
    assert {b[1] for b in booted} == set(machines.KINDS), sorted(booted)
    assert {b[2] for b in booted} - {None} == set(modes.ALL_MODES), sorted(booted)


def _sides(boots: Set[Tuple[str, str, str, int]]) -> Dict[str, Set[str]]:
    """For each attack test, the sides the attack boots show: 'works' (its
    protection off) and 'stopped' (on, and not a window its mode has by
    design), where the machine runs it (CPUs, a disk, PKS for pgtprot)."""
    out: Dict[str, Set[str]] = {}
    for _, machine, mode, cpus in boots:
        kind, xpfo, pgt = machines.get(machine), modes.xpfo(mode), modes.pgt(mode)
        for a in attacks.LKDTM_ATTACKS:
            if a.min_cpus > cpus or (a.needs_disk and not kind.has_disk):
                continue
            if xpfo in attacks.OPEN_MODES:
                out.setdefault(a.name, set()).add("works")
            elif (a.name, xpfo) not in attacks.BY_DESIGN:
                out.setdefault(a.name, set()).add("stopped")
        for a in attacks.PGTPROT_ATTACKS:
            if pgt == "off":
                out.setdefault(a.name, set()).add("works")
            elif kind.has_pks:
                out.setdefault(a.name, set()).add("stopped")
        for v in attacks.RET2DIR_VARIANTS:
            if v in attacks.RET2DIR_DISK_VARIANTS and not kind.has_disk:
                continue
            out.setdefault(f"ret2dir[{v}]", set()).add(
                "works" if xpfo in attacks.OPEN_MODES else "stopped")
    return out


def test_default_runs_every_attack_on_both_sides(selections):
    sides = _sides(_boots(selections["default"], "attacks"))
    names = ([a.name for a in attacks.LKDTM_ATTACKS + attacks.PGTPROT_ATTACKS]
             + [f"ret2dir[{v}]" for v in attacks.RET2DIR_VARIANTS])
    missing = {n: {"works", "stopped"} - sides.get(n, set()) for n in names}
    assert not {n: s for n, s in missing.items() if s}, missing


def test_default_runs_predict_in_its_modes(selections):
    # predict runs in the attack boots on QEMU kinds (attack_runs.run)
    booted = {mode for _, machine, mode, _ in _boots(selections["default"], "attacks")
              if machines.get(machine).emulator == machines.QEMU}
    assert set(attacks.PREDICT_MODES) <= {modes.xpfo(m) for m in booted}, booted


def test_full_adds_the_tests_marked_full_and_nothing_else(selections):
    default = {t["test"] for t in selections["default"]}
    full = {t["test"] for t in selections["full"]}
    marked = {t["test"] for t in selections["full"] if t["full"]}
    assert marked, "nothing is marked 'full': then --full has nothing to add"
    assert default <= full
    assert full - default == marked
    assert not any(t["full"] for t in selections["default"])
    # and what they boot is not booted by the default run
    assert _boots([t for t in selections["full"] if t["full"]]) - _boots(selections["default"])


def test_full_is_in_the_help_of_check():
    # `./xpfo check --help` is pytest's --help over tests/ (harness/cli.py)
    r = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider",
                        "tests"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "--full" in r.stdout and "./xpfo check --full" in r.stdout, r.stdout


def test_not_integration_leaves_out_what_full_adds(tmp_path):
    tests = _collect(tmp_path / "host.json", "--full", "-m", "not integration")
    assert tests and not any(t["integration"] for t in tests)


def test_check_installs_what_the_bochs_tests_run_under_before_pytest(monkeypatch):
    # the host-side Bochs tests drive a fake Bochs under a real Xvfb: on a
    # fresh machine `./xpfo check` must install the Bochs packages before
    # pytest starts, not leave them to the first Bochs boot
    from harness import cli, deps
    ensured, ran = [], []
    monkeypatch.setattr(deps, "ensure",
                        lambda quiet=False, packages=deps.PACKAGES: ensured.append(packages))
    monkeypatch.setattr(cli.subprocess, "call", lambda cmd, cwd=None: ran.append(cmd) or 0)
    assert cli.main(["check", "-m", "not integration"]) == 0
    assert deps.PACKAGES in ensured and deps.BOCHS_PACKAGES in ensured
    assert len(ran) == 1 and "pytest" in ran[0]
