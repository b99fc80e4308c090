"""Integration: the machine kinds other than the default one boot the built
kernel (machines.py). Bounded for CI: one Bochs boot (about 15 s to the
runner, under a minute in all) and two QEMU attack boots with pti=on.

The guest's `info` step does not report the CPU's flags: the Bochs boot
adds a step of its own (`cpuflags`, written here) to an initramfs built in
a temporary tree, and boots the kernel built from the series with it.
"""

import argparse
import os
import shutil
from pathlib import Path

import pytest

from harness import attacks, cli, guest, initramfs, judge, machines, qemu
from harness.paths import LAYOUT, Layout

pytestmark = pytest.mark.integration

CPUFLAGS_STEP = r"""#!/bin/sh
# The first CPU's flags and bugs from /proc/cpuinfo, as one result.
flags=$(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
bugs=$(sed -n 's/^bugs[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo "RESULT {\"flags\": \"$flags\", \"bugs\": \"$bugs\"}"
"""


@pytest.fixture(scope="module")
def kernel():
    cli.ensure_kernel(argparse.Namespace(jobs=None))


@pytest.fixture(scope="module")
def flags_tree(kernel, tmp_path_factory):
    """A copy of guest/ with the cpuflags step, and its initramfs; the
    guest programs already built are reused."""
    root = tmp_path_factory.mktemp("machines")
    shutil.copytree(LAYOUT.guest_src, root / "guest")
    step = root / "guest" / "steps" / "cpuflags"
    step.write_text(CPUFLAGS_STEP)
    step.chmod(0o755)
    layout = Layout(root=root)
    shutil.copytree(LAYOUT.guest_build / "bin", layout.guest_build / "bin")
    for binary in (layout.guest_build / "bin").iterdir():
        os.utime(binary)     # newer than their sources: not compiled again
    initramfs.build(layout)
    return layout


def test_bochs_tgl_boots_to_the_runner_with_pcid_invpcid_and_cet(flags_tree):
    req = guest.GuestRequest(steps=["info", "cpuflags"], mem_mb=512, timeout=60,
                             label="bochs-tgl-flags", kernel=LAYOUT.bzimage,
                             machine="bochs-tgl")
    r = guest.run(req, layout=flags_tree)
    v = judge.boot(r)
    assert v.passed, v.reasons
    assert r.outcome is qemu.Outcome.POWERED_OFF
    assert r.console.steps["info"].results[0]["cpus"] == 1
    flags = set(r.console.steps["cpuflags"].results[0]["flags"].split())
    assert {"pcid", "invpcid", "pge", "ibt"} <= flags, sorted(flags)
    assert any("CET detected: Indirect Branch Tracking enabled" in x for x in r.console.lines)
    # the CPUID bits that 6.12 WARNs about on Bochs are off (machines.BOCHS_PARAMS)
    assert not {"pku", "avx512f"} & flags


@pytest.mark.parametrize("mode", ["off", "strict"])
def test_attacks_both_sides_with_pti(kernel, mode):
    run = cli.run_attacks(mode, cpus=2, timeout=900, machine="qemu-pti")
    assert run["machine"] == "qemu-pti" and run["outcome"] == qemu.Outcome.POWERED_OFF.value
    attack = [r for r in run["reasons"] if not r.startswith("KUnit")]
    assert not attack, f"{attack} (log {run['log']})"
    by_test = {v["test"]: v for v in run["verdicts"]}
    assert {a.name for a in attacks.LKDTM_ATTACKS} <= set(by_test)
    read = by_test["XPFO_READ_USER"]["detail"]
    assert read.startswith("attack works" if mode == "off" else "stopped"), read
    assert run["status"] == judge.Status.SUCCESS.value, run["reasons"]
    log = Path(run["log"]).read_text(errors="replace")
    assert "Kernel/User page tables isolation: force enabled on command line" in log
    assert machines.get("qemu-pti").params == ("pti=on",)
