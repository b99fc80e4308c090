"""The guest runner against a stand-in for QEMU: deadlines and crashes."""

import os
import stat
import subprocess
import time
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


def test_hung_guest_is_asked_where_its_cpus_are_and_killed(tmp_path, machine, monkeypatch):
    # the stand-in never finishes and echoes what the harness types on the
    # multiplexed console: a break and a SysRq key each, then the monitor's
    # command; then it is killed at the deadline with its last lines kept
    monkeypatch.setattr(qemu, "QEMU", _fake_qemu(
        tmp_path, 'echo "Linux version 6.12"; echo "XH-STEP-BEGIN stress"; exec cat\n'))
    monkeypatch.setattr(qemu, "HUNG_WAIT", 0.1)
    log = tmp_path / "out.log"
    run = qemu.run(machine, timeout=2, log=log)
    assert run.outcome is qemu.Outcome.TIMEOUT
    assert run.elapsed < 20
    assert "XH-STEP-BEGIN stress" in run.last_lines()
    text = log.read_text()
    assert "XH-STEP-BEGIN stress" in text
    assert "\x01bl\x01bw\x01cinfo registers -a\n" in text


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
    # ttyS0 is the console, ttyS1 the runner's results (a file)
    serials = [args[i + 1] for i, a in enumerate(args) if a == "-serial"]
    assert serials == ["mon:stdio", "file:results.ttyS1"]
    assert "file:/x/r" in m.qemu_args(results=Path("/x/r"))


def test_results_port_is_followed_into_the_log(tmp_path, machine, monkeypatch):
    # the second -serial is the runner's results port: a file QEMU writes
    monkeypatch.setattr(qemu, "QEMU", _fake_qemu(tmp_path, r'''
for a; do case $a in file:*) res=${a#file:};; esac; done
echo "Linux version 6.12"; echo "KTAP version 1"; echo "1..1"
echo "# XH-STEP-BEGIN info"
printf 'XH-RESULT info {"cpus": 2}\n' >> "$res"
sleep 0.3; echo "ok 1 info"; echo "# XH-DONE"
'''))
    log = tmp_path / "out.log"
    run = qemu.run(machine, timeout=10, log=log)
    assert run.outcome is qemu.Outcome.POWERED_OFF
    assert run.console.steps["info"].results == [{"cpus": 2}]
    assert 'XH-RESULT info {"cpus": 2}' in log.read_text()
    assert not (tmp_path / "out.log.ttyS1").exists()


def test_runner_that_stops_short_of_its_plan_is_a_crash(tmp_path, machine, monkeypatch):
    monkeypatch.setattr(qemu, "QEMU", _fake_qemu(
        tmp_path, 'echo "Linux version 6.12"; echo "KTAP version 1"; echo "1..2"; '
                  'echo "# XH-STEP-BEGIN a"; echo "ok 1 a"; exit 0\n'))
    run = qemu.run(machine, timeout=10, log=tmp_path / "out.log")
    assert run.outcome is qemu.Outcome.CRASHED
    # the message says how it ended: CI keeps the message, not the log
    assert "exit status 0, last line 'ok 1 a'" in run.message


def test_step_end_on_the_results_port_finishes_a_cut_console(tmp_path, machine, monkeypatch):
    # the console's last "ok" line overtaken by the kernel's power-off message
    monkeypatch.setattr(qemu, "QEMU", _fake_qemu(tmp_path, r'''
for a; do case $a in file:*) res=${a#file:};; esac; done
echo "Linux version 6.12"; echo "KTAP version 1"; echo "1..1"
echo "# XH-STEP-BEGIN info"
printf 'XH-RESULT info {"cpus": 2}\nXH-END 1 info 0\n' >> "$res"
echo "ok 1 i[   44.9] reboot: Power down"
'''))
    run = qemu.run(machine, timeout=10, log=tmp_path / "out.log")
    assert run.outcome is qemu.Outcome.POWERED_OFF
    assert run.console.steps["info"].exit_status == 0


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_interrupt_or_exception_kills_the_guest_at_once(tmp_path, machine, monkeypatch, exc):
    pidfile = tmp_path / "pid"
    monkeypatch.setattr(qemu, "QEMU", _fake_qemu(
        tmp_path, f'echo $$ > {pidfile}; echo "Linux version 6.12"; exec sleep 60\n'))

    def watch(con):
        raise exc()

    start = time.monotonic()
    with pytest.raises(exc):
        qemu.run(machine, timeout=50, log=tmp_path / "out.log", watch=watch)
    assert time.monotonic() - start < 10
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)


def test_second_interrupt_while_stopping_still_kills(tmp_path, monkeypatch):
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    real_wait = proc.wait
    calls = []

    def wait(*a, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt   # the user pressed Ctrl-C again
        return real_wait(*a, **kw)

    monkeypatch.setattr(proc, "wait", wait)
    qemu.stop(proc)
    assert proc.returncode is not None and len(calls) == 2


# what would make QEMU accept a connection: a display server, a monitor or
# a serial port on a socket, a network device
_LISTENERS = ("-vnc", "-spice", "-qmp", "-gdb", "-s", "-netdev", "-nic", "-net", "-chardev")


@pytest.mark.parametrize("kind", ["qemu", "qemu-pti"])
@pytest.mark.parametrize("interactive", [False, True])
def test_qemu_listens_nowhere(tmp_path, kind, interactive):
    from harness import machines
    m = qemu.Machine(kernel=tmp_path / "bzImage", initrd=tmp_path / "initrd",
                     disks=[tmp_path / "d"],
                     kind=machines.get(kind))
    args = m.qemu_args(interactive=interactive)
    assert args[args.index("-display") + 1] == "none" and "-nodefaults" in args
    assert not set(_LISTENERS) & set(args), args
    for opt in ("-serial", "-monitor"):
        for i, a in enumerate(args):
            if a == opt:
                assert args[i + 1] in ("stdio", "mon:stdio", "none") \
                    or args[i + 1].startswith("file:"), args[i + 1]
