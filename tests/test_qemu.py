"""The guest runner against a stand-in for QEMU: deadlines and crashes."""

import os
import stat
from pathlib import Path

import pytest

from harness import qemu


def _fake_qemu(tmp_path: Path, script: str) -> str:
    exe = tmp_path / "fake-qemu"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


@pytest.fixture
def machine(tmp_path: Path) -> qemu.Machine:
    return qemu.Machine(kernel=tmp_path / "bzImage", initrd=tmp_path / "initrd")


def test_hung_guest_is_killed_at_the_deadline(tmp_path, machine, monkeypatch):
    monkeypatch.setattr(qemu, "QEMU", _fake_qemu(
        tmp_path, 'echo "Linux version 6.12"; echo "XH-STEP-BEGIN stress"; exec sleep 60\n'))
    log = tmp_path / "out.log"
    run = qemu.run(machine, timeout=2, log=log)
    assert run.outcome is qemu.Outcome.TIMEOUT
    assert run.elapsed < 20
    assert "XH-STEP-BEGIN stress" in run.last_lines()
    assert "XH-STEP-BEGIN stress" in log.read_text()


def test_guest_that_panics_is_a_crash(tmp_path, machine, monkeypatch):
    monkeypatch.setattr(qemu, "QEMU", _fake_qemu(
        tmp_path, 'echo "Linux version 6.12"; echo "Kernel panic - not syncing: x"; exit 0\n'))
    run = qemu.run(machine, timeout=10, log=tmp_path / "out.log")
    assert run.outcome is qemu.Outcome.CRASHED
    assert run.console.incidents[0].kind == "panic"


def test_clean_guest_powers_off(tmp_path, machine, monkeypatch):
    monkeypatch.setattr(qemu, "QEMU", _fake_qemu(
        tmp_path, 'echo "Linux version 6.12"; echo XH-DONE; exit 0\n'))
    run = qemu.run(machine, timeout=10, log=tmp_path / "out.log")
    assert run.outcome is qemu.Outcome.POWERED_OFF


def test_qemu_that_cannot_start(tmp_path, machine, monkeypatch):
    monkeypatch.setattr(qemu, "QEMU", _fake_qemu(tmp_path, 'echo "qemu: bad option" >&2; exit 1\n'))
    run = qemu.run(machine, timeout=10, log=tmp_path / "out.log")
    assert run.outcome is qemu.Outcome.QEMU_FAILED


def test_machine_is_data(machine):
    m = qemu.Machine(kernel=machine.kernel, initrd=machine.initrd, cpus=4, mem_mb=512,
                     params=["xpfo=sync", "hugepages=4"])
    args = m.qemu_args()
    assert args[args.index("-smp") + 1] == "4"
    assert args[args.index("-cpu") + 1] == "max"
    assert args[args.index("-accel") + 1] == "tcg,thread=multi"
    cmdline = args[args.index("-append") + 1]
    assert "xpfo=sync hugepages=4" in cmdline and "panic=-1" in cmdline
