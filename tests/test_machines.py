"""Machine kinds: the kinds as data, the Bochs machine's files and runner
(against stand-ins for bochs-bin and xorriso), steps a machine cannot run,
and the attack table's columns."""

import stat
from pathlib import Path
from typing import List, Optional

import pytest

from harness import (attack_runs, attacks, bochs, build, cli, console, guest, judge, machines,
                     modes, qemu)

from conftest import DATA


def _machine(tmp_path: Path, kind: str, **kw) -> qemu.Machine:
    return qemu.Machine(kernel=tmp_path / "bzImage", initrd=tmp_path / "initrd",
                        kind=machines.get(kind), **kw)


def test_kinds_are_data():
    assert set(machines.KINDS) == {"qemu", "qemu-pti", "bochs-tgl", "bochs-2cpu", "bochs-pti"}
    pti = machines.get("bochs-pti")
    assert "pti=on" in pti.params and pti.has_pcid and pti.cpus == 2 and not pti.has_disk
    tgl, two = machines.get("bochs-tgl"), machines.get("bochs-2cpu")
    assert (tgl.emulator, tgl.cpu_model, tgl.cpus) == (machines.BOCHS, "tigerlake", 1)
    assert two.cpus == 2 and not two.has_disk and two.has_pcid and two.has_cet
    assert machines.get("qemu").has_pks and not machines.get("qemu").has_pcid
    assert tgl.vcpus(4) == 1 and machines.get("qemu").vcpus(4) == 4
    with pytest.raises(Exception, match="unknown machine 'nope'"):
        machines.get("nope")


def test_qemu_pti_adds_pti_on_before_the_requests_params(tmp_path):
    args = _machine(tmp_path, "qemu-pti", params=["xpfo=strict"]).qemu_args()
    assert args[args.index("-cpu") + 1] == "max"
    assert "no_timer_check pti=on xpfo=strict" in args[args.index("-append") + 1]
    assert "pti=on" not in _machine(tmp_path, "qemu").cmdline()


def test_a_bochs_machine_has_no_qemu_command(tmp_path):
    with pytest.raises(Exception, match="not a QEMU machine"):
        _machine(tmp_path, "bochs-tgl").qemu_args()


def test_bochsrc(tmp_path):
    m = _machine(tmp_path, "bochs-2cpu", cpus=2, mem_mb=512)
    files = bochs.Files(tmp_path / "run")
    rc = bochs.bochsrc(m, files, (4001, 4002))
    lines = rc.splitlines()
    cpu = next(x for x in lines if x.startswith("cpu:"))
    assert "model=tigerlake" in cpu and "count=2" in cpu and "ignore_bad_msrs=1" in cpu
    assert f"ips={machines.BOCHS_IPS}" in cpu
    # a triple fault ends Bochs (a panic) instead of booting the CD again
    assert "reset_on_triple_fault=0" in cpu
    assert "memory: guest=512, host=512" in lines
    assert f"ata0-master: type=cdrom, path={files.iso}, status=inserted" in lines
    assert "boot: cdrom" in lines
    # sockets to the harness's listeners: a file would be buffered by Bochs
    assert "com1: enabled=1, mode=socket-client, dev=127.0.0.1:4001" in lines
    assert "com2: enabled=1, mode=socket-client, dev=127.0.0.1:4002" in lines
    assert "display_library: x" in lines
    assert "panic: action=fatal" in lines
    with pytest.raises(Exception, match="no virtio disks"):
        bochs.bochsrc(_machine(tmp_path, "bochs-tgl", disks=[tmp_path / "d"]), files, (1, 2))
    with pytest.raises(Exception, match="not a Bochs machine"):
        bochs.bochsrc(_machine(tmp_path, "qemu"), files, (1, 2))


def test_iso_command_and_isolinux_cfg(tmp_path):
    m = _machine(tmp_path, "bochs-2cpu", params=["xpfo=strict", "xh.steps=info"])
    files = bochs.Files(tmp_path / "run")
    cmd = bochs.iso_command(m, files)
    assert cmd[:3] == ["xorriso", "-as", "mkisofs"]
    assert cmd[cmd.index("-o") + 1] == str(files.iso)
    assert cmd[cmd.index("-b") + 1] == "isolinux/isolinux.bin"
    # nothing is copied: the files are grafted from where they are
    assert f"kernel={tmp_path / 'bzImage'}" in cmd and f"initrd={tmp_path / 'initrd'}" in cmd
    assert f"isolinux/isolinux.cfg={files.isolinux_cfg}" in cmd
    assert f"isolinux/ldlinux.c32={bochs.LDLINUX}" in cmd
    cfg = bochs.isolinux_cfg(m).splitlines()
    assert "  KERNEL /kernel" in cfg and "  INITRD /initrd" in cfg
    append = next(x for x in cfg if x.startswith("  APPEND "))
    assert append.endswith(" tsc_early_khz=75000 xpfo=strict xh.steps=info")
    assert "console=ttyS0" in append and "panic=-1" in append


def test_steps_that_need_a_disk():
    assert guest.needs_disk("disk") and guest.needs_disk("build:2")
    assert guest.needs_disk("lkdtm:XPFO_READ_BDEV")
    assert not guest.needs_disk("lkdtm:XPFO_READ_USER") and not guest.needs_disk("symlink")
    steps = attack_runs.steps(1, disk=False)
    assert "disk" not in steps and "lkdtm:XPFO_READ_BDEV" not in steps
    assert {"info", "symlink", attacks.RET2DIR_STEP, "lkdtm:XPFO_READ_USER"} <= set(steps)
    assert not any(guest.needs_disk(s) for s in steps)
    with_disk = attack_runs.steps(2)
    assert with_disk[:4] == ["info", "pgtaudit:boot", "disk", "symlink"]
    assert set(attacks.lkdtm_steps(2)) <= set(with_disk)
    assert "lkdtm:XPFO_READ_BDEV" in with_disk
    na = attacks.not_applicable(1, disk=False)
    assert na["XPFO_READ_BDEV"] == na["ret2dir[pagecache]"] == "n/a (no disk on this machine)"
    assert na["XPFO_SMP"] == "n/a (needs 2 CPUs; 1 on this machine)"
    assert attacks.not_applicable(2) == {}


def test_guest_request_on_bochs_takes_the_kinds_cpus_and_refuses_disks(tmp_path):
    from harness.paths import Layout
    layout = Layout(root=tmp_path)
    req = guest.GuestRequest(steps=["info"], cpus=4, machine="bochs-tgl", timeout=100)
    m = guest.machine(req, layout)
    assert m.cpus == 1 and m.kind.name == "bochs-tgl" and not m.disks
    assert guest.deadline(req) == 100 * machines.get("bochs-tgl").slowdown
    with pytest.raises(Exception, match="no disk"):
        guest.machine(guest.GuestRequest(steps=["info"], disk=True, machine="bochs-tgl"),
                      layout)
    with pytest.raises(Exception, match="step disk needs one"):
        guest.machine(guest.GuestRequest(steps=["disk"], machine="bochs-2cpu"), layout)


@pytest.mark.parametrize("argv, what", [
    (["boot", "--machine", "bogus", "info"], "error: unknown machine 'bogus'"),
    (["boot", "--machine", "bochs-tgl", "--dry-run", "disk", "info"],
     "error: machine bochs-tgl has no disk (no virtio), and step disk needs one"),
    (["test", "--machines", "qemu", "nope"], "error: unknown machine 'nope'"),
])
def test_bad_machine_is_one_error_before_any_build(argv, what, capsys, monkeypatch):
    def no_build(*args, **kw):
        raise AssertionError("built the kernel")
    monkeypatch.setattr(build, "ensure_kernel", no_build)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(what) and err.count("error:") == 1


def test_missing_bochs_is_one_error(capsys, monkeypatch):
    from harness import deps
    monkeypatch.setattr(deps, "BOCHS_PACKAGES", {"bochs": "/nonexistent/bochs-bin"})
    monkeypatch.setattr(deps.shutil, "which", lambda exe: None)
    monkeypatch.setattr(build, "ensure_kernel", lambda *a, **kw: None)
    assert cli.main(["boot", "--machine", "bochs-tgl", "info"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: missing packages bochs and no apt-get")


def test_dry_run_prints_the_iso_command_the_bochsrc_and_bochs(capsys):
    assert cli.main(["boot", "--dry-run", "--machine", "bochs-2cpu", "--mode", "strict",
                     "info"]) == 0
    out = capsys.readouterr().out
    assert "$ xorriso -as mkisofs" in out
    assert "cpu: model=tigerlake, count=2" in out
    assert "APPEND console=ttyS0" in out and "xpfo=strict xh.steps=info" in out
    assert "$ bochs-bin -q -f xpfo-bochs/bochsrc -rc xpfo-bochs/debugger.rc" in out


def test_interactive_boot_on_bochs_is_refused(capsys):
    assert cli.main(["boot", "--dry-run", "--machine", "bochs-tgl"]) == 2
    assert "runs steps only" in capsys.readouterr().err


# --- the attack table and the verdict on a machine without a disk


def _run(lines: List[str], kind: str) -> qemu.Run:
    m = qemu.Machine(kernel=Path("k"), initrd=Path("i"), kind=machines.get(kind))
    return qemu.Run(m, qemu.Outcome.POWERED_OFF, 1.0, console.parse(lines), Path("x.log"))


def test_no_disk_machine_is_not_judged_on_the_disk_tests():
    lines = (DATA / "xpfo_off.log").read_text().splitlines()
    con = console.parse(lines)
    con.steps.pop("lkdtm:XPFO_READ_BDEV", None)
    names = {v.test for v in attacks.judge_all(con, "off", 2, disk=False)}
    assert "XPFO_READ_BDEV" not in names and "ret2dir[pagecache]" not in names
    bdev = [v for v in attacks.judge_all(con, "off", 2) if v.test == "XPFO_READ_BDEV"]
    assert bdev and not bdev[0].passed
    # judge.attack_run asks the machine whether it had a disk
    no_bdev = [x for x in lines if "XPFO_READ_BDEV" not in x]
    on_bochs = judge.attack_run(_run(no_bdev, "bochs-2cpu"), "off", 2, with_kunit=False)
    assert not [r for r in on_bochs.verdict.reasons if "BDEV" in r]
    on_qemu = judge.attack_run(_run(no_bdev, "qemu"), "off", 2, with_kunit=False)
    assert [r for r in on_qemu.verdict.reasons if "XPFO_READ_BDEV" in r]


def test_attack_table_has_a_column_per_machine_and_mode(capsys):
    def result(machine: str, mode: str, disk: bool) -> dict:
        tests = ["XPFO_READ_USER"] + (["XPFO_READ_BDEV"] if disk else [])
        return {"mode": mode, "machine": machine, "reasons": [],
                "verdicts": [{"test": t, "passed": True, "detail": "attack works"}
                             for t in tests],
                "not_applicable": attacks.not_applicable(1, disk)}
    attack_runs.print_table([result("qemu", "off", True), result("bochs-tgl", "off", False),
                             result("bochs-tgl", "strict", False)])
    out = capsys.readouterr().out.splitlines()
    assert "| test | xpfo=off, qemu | xpfo=off, bochs-tgl | xpfo=strict, bochs-tgl |" in out
    bdev = next(x for x in out if x.startswith("| XPFO_READ_BDEV |"))
    assert bdev.split(" | ")[1:] == ["PASS: attack works", "n/a (no disk on this machine)",
                                     "n/a (no disk on this machine) |"]
    # rows in the catalogue's order, whichever run had them first
    rows = [x.split(" | ")[0] for x in out if x.startswith("| XPFO")]
    assert rows.index("| XPFO_READ_USER") < rows.index("| XPFO_READ_BDEV")
    # one machine, the default: the columns are the modes alone, as before
    attack_runs.print_table([result("qemu", "off", True)])
    assert "| test | xpfo=off |" in capsys.readouterr().out


REFUSAL = ("this CPU has no supervisor protection keys (PKS); pgtprot=batched not enabled, "
           "page tables stay writable")


def _pgt_result(mode: str, detail: str, refused: Optional[str] = None, **kw) -> dict:
    return {"mode": mode, "machine": machines.DEFAULT, "reasons": [],
            "verdicts": [{"test": "PGTPROT_WRITE_PTE", "passed": True, "detail": detail}],
            "pgt_refused": refused, **kw}


def test_attack_table_marks_the_recommended_column(capsys):
    results = [_pgt_result("off", "attack works"), _pgt_result("strict", "attack works"),
               _pgt_result(modes.RECOMMENDED, "stopped: pgtprot oops, guest went on")]
    attack_runs.print_table(results, recommended=modes.RECOMMENDED)
    out = capsys.readouterr().out.splitlines()
    assert ("| test | xpfo=off | xpfo=strict | xpfo=strict pgtprot=batched (recommended) |"
            in out)
    row = next(x for x in out if x.startswith("| PGTPROT_WRITE_PTE |"))
    assert row.endswith("| PASS: stopped: pgtprot oops, guest went on |")
    assert ("(recommended): xpfo=strict pgtprot=batched, the recommended configuration "
            "(pgtprot needs a CPU with PKS)") in out
    assert not [x for x in out if "refused" in x]
    # `./xpfo test` marks no column
    attack_runs.print_table(results)
    assert "recommended" not in capsys.readouterr().out


def test_attack_table_says_pgtprot_was_refused(capsys):
    refused = _pgt_result(modes.RECOMMENDED,
                          f"{attacks.REFUSED}: attack works: the store landed", REFUSAL)
    attack_runs.print_table([_pgt_result("strict", "attack works"), refused],
                            recommended=modes.RECOMMENDED)
    out = capsys.readouterr().out.splitlines()
    assert ("| test | xpfo=strict | xpfo=strict pgtprot=batched (recommended; pgtprot "
            "refused) |") in out
    assert (f"pgtprot refused in xpfo=strict pgtprot=batched: {REFUSAL} (the kernel ran "
            "without pgtprot)") in out
    # a result saved before runs recorded the reason: its verdicts say it
    old = _pgt_result("pgt-batched", f"{attacks.REFUSED}: attack works: the store landed")
    del old["pgt_refused"]
    assert attack_runs.refusal(old) == "no PKS on this machine"
    # pgtprot off: nothing to refuse
    assert attack_runs.refusal(_pgt_result("strict", "attack works", "x")) is None


def test_attack_run_records_a_refused_pgtprot(monkeypatch):
    log = (DATA / "xpfo_off.log").read_text().splitlines()
    lines = [f"[    0.100000] pgtprot: refused: {REFUSAL}"] + log
    monkeypatch.setattr(guest, "run", lambda req, **kw: _run(lines, "bochs-2cpu"))
    res = attack_runs.run(modes.RECOMMENDED, 2, 60, kunit=False, machine="bochs-2cpu")
    assert res["pgt_refused"] == REFUSAL
    monkeypatch.setattr(guest, "run", lambda req, **kw: _run(log, "qemu"))
    assert attack_runs.run("strict", 2, 60, kunit=False)["pgt_refused"] is None


def test_a_hung_attack_boot_is_booted_again_and_said_so(monkeypatch):
    log = (DATA / "xpfo_off.log").read_text().splitlines()
    hung = _run(log[:40] + ["[   50.000000] sysrq: Show backtrace of all active CPUs"], "qemu")
    hung.outcome = qemu.Outcome.TIMEOUT
    labels = []

    def boot(req, **kw):
        labels.append(req.label)
        return hung if len(labels) == 1 else _run(log, "qemu")

    monkeypatch.setattr(guest, "run", boot)
    res = attack_runs.run("off", 2, 60, kunit=False, retry_hung=True)
    assert labels == ["attacks-off", "attacks-off-again"]
    assert res["outcome"] == qemu.Outcome.POWERED_OFF.value
    note = attack_runs.hung_note(res)
    assert note and "first boot hung" in note and "sysrq: Show backtrace" in note
    # without retry_hung a hang is the result; a crash is never retried
    labels.clear()
    assert attack_runs.run("off", 2, 60, kunit=False)["outcome"] == "timeout"
    assert labels == ["attacks-off"]
    hung.outcome = qemu.Outcome.CRASHED
    labels.clear()
    res = attack_runs.run("off", 2, 60, kunit=False, retry_hung=True)
    assert res["outcome"] == "crashed" and labels == ["attacks-off"]
    assert attack_runs.hung_note(res) is None


# --- the Bochs runner against stand-ins for bochs-bin and xorriso


def _exe(path: Path, script: str) -> str:
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


# The stand-in connects to the COM ports its bochsrc names and runs a script
# of ("con" | "res" | "log", text) writes, ("sleep", s) and ("exit", rc).
_FAKE_BOCHS = r"""#!/usr/bin/env python3
import re, socket, sys, time
rc = open(sys.argv[3]).read()
ports = [int(p) for p in re.findall(r"^com[12]: .*dev=127\.0\.0\.1:(\d+)$", rc, re.M)]
con, res = (socket.create_connection(("127.0.0.1", p)) for p in ports)
out = {"con": con.sendall, "res": res.sendall,
       "log": lambda b: (sys.stderr.write(b.decode()), sys.stderr.flush())}
out["log"](b"00000000000i[SYS   ] bx_pc_system_c::Reset(HARDWARE) called\n")
for what, arg in SCRIPT:
    if what == "sleep":
        time.sleep(arg)
    elif what == "exit":
        sys.exit(arg)
    else:
        out[what](arg.encode())
time.sleep(60)
"""


@pytest.fixture
def fake_bochs(tmp_path, monkeypatch):
    monkeypatch.setattr(bochs, "check", lambda: None)
    monkeypatch.setattr(bochs, "XORRISO", _exe(tmp_path / "fake-xorriso", r'''#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = -o ] && : > "$2"; shift; done
'''))
    monkeypatch.setattr(bochs, "POWER_OFF_GRACE", 0.2)

    def make(script: list) -> qemu.Machine:
        text = _FAKE_BOCHS.replace("SCRIPT", repr(script))
        monkeypatch.setattr(bochs, "BOCHS", _exe(tmp_path / "fake-bochs", text))
        return _machine(tmp_path, "bochs-tgl", cpus=1)
    return make


_BOOT = [("con", "[    0.000000] Linux version 6.12\nKTAP version 1\n")]


def test_bochs_run_that_powers_down_and_does_not_exit(tmp_path, fake_bochs):
    m = fake_bochs(_BOOT + [
        ("con", "1..1\n# XH-STEP-BEGIN info\n"),
        ("res", 'XH-RESULT info {"cpus": 1}\nXH-END 1 info 0\n'), ("sleep", 0.2),
        ("con", "ok 1 info\n# XH-DONE\n[   20.1] reboot: Power down\n")])
    log = tmp_path / "out.log"
    r = bochs.run(m, timeout=30, log=log)
    assert r.outcome is qemu.Outcome.POWERED_OFF, r.message
    assert r.elapsed < 10 and r.runner_started is not None
    assert r.console.steps["info"].results == [{"cpus": 1}]
    assert 'XH-RESULT info {"cpus": 1}' in log.read_text()
    assert "Reset(HARDWARE)" in (tmp_path / "out.log.bochs").read_text()


def test_bochs_that_exits_at_acpi_power_off(tmp_path, fake_bochs):
    # what Bochs 2.7 does: a "panic" of its ACPI device, exit status 1
    m = fake_bochs(_BOOT + [
        ("con", "1..1\n# XH-STEP-BEGIN info\nok 1 info\n# XH-DONE\n"),
        ("log", "02793120426p[ACPI  ] >>PANIC<< ACPI control: soft power off\n"),
        ("exit", 1)])
    r = bochs.run(m, timeout=30, log=tmp_path / "out.log")
    assert r.outcome is qemu.Outcome.POWERED_OFF and r.elapsed < 10, r.message


def test_bochs_guest_that_resets_is_a_crash(tmp_path, fake_bochs):
    # panic=-1 reboots: Bochs boots the CD again, so the reset ends the run
    m = fake_bochs(_BOOT + [
        ("con", "1..2\n# XH-STEP-BEGIN lkdtm:PANIC\n"),
        ("con", "[    3.1] Kernel panic - not syncing: dumptest\n"), ("sleep", 0.2),
        ("log", "00123456789i[SYS   ] bx_pc_system_c::Reset(SOFTWARE) called\n")])
    r = bochs.run(m, timeout=30, log=tmp_path / "out.log")
    assert r.outcome is qemu.Outcome.CRASHED and r.elapsed < 10
    assert r.message.startswith("the guest reset the machine")
    assert r.console.incidents[0].kind == "panic"


def test_bochs_guest_that_hangs_is_killed_at_the_deadline_with_its_last_lines(
        tmp_path, fake_bochs):
    m = fake_bochs(_BOOT + [("con", "# XH-STEP-BEGIN stress\nthe last line\n")])
    r = bochs.run(m, timeout=2, log=tmp_path / "out.log")
    assert r.outcome is qemu.Outcome.TIMEOUT and r.elapsed < 10
    assert r.last_lines().endswith("XH-STEP-BEGIN stress\nthe last line")


def test_bochs_that_cannot_start_says_why(tmp_path, fake_bochs):
    m = fake_bochs([("log", "00000000000p[      ] >>PANIC<< bochsrc: unknown directive\n"),
                    ("exit", 1)])
    r = bochs.run(m, timeout=10, log=tmp_path / "out.log")
    assert r.outcome is qemu.Outcome.QEMU_FAILED
    assert "unknown directive" in r.message and "out.log.bochs" in r.message


def test_kunit_cases_that_need_two_cpus_may_skip_on_one():
    con = console.parse(["KTAP version 1", "1..1", "    KTAP version 1", "    # Subtest: xpfo",
                         "    1..2", "    ok 1 xpfo_test_unmap",
                         "    ok 2 xpfo_test_remote_migrate # SKIP needs two CPUs", "ok 1 xpfo"])
    assert judge.kunit(con, "strict", cpus=1).passed
    v = judge.kunit(con, "strict", cpus=2)
    assert v.reasons == ("KUnit xpfo suite, xpfo=strict: xpfo_test_remote_migrate skipped",)


def test_listening_sockets_sees_a_listener_on_every_interface_and_not_on_loopback():
    import os
    import socket
    from harness import bochs
    with socket.create_server(("127.0.0.1", 0)) as lo:
        assert bochs.listening_sockets(os.getpid()) == []
        with socket.create_server(("0.0.0.0", 0)) as anyaddr:
            port = f"{anyaddr.getsockname()[1]:04X}"
            found = bochs.listening_sockets(os.getpid())
            assert found == [f"tcp 00000000:{port}"], (found, lo)
    assert bochs.listening_sockets(2 ** 22 + 7) == []      # no such process


def test_bochs_draws_into_a_private_x_server_and_serves_no_vnc(tmp_path):
    from harness import bochs
    m = qemu.Machine(kernel=tmp_path / "bzImage", initrd=tmp_path / "initrd",
                     kind=machines.get("bochs-tgl"))
    rc = bochs.bochsrc(m, bochs.Files(tmp_path), (1, 2))
    assert "display_library: x\n" in rc and "rfb" not in rc and "vnc" not in rc
    xvfb = bochs.xvfb_command(3)
    assert xvfb[xvfb.index("-nolisten") + 1] == "tcp"
