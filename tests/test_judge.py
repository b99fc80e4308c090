"""The one verdict: every rule that fails a run, and how verdicts combine."""

import re
from pathlib import Path
from typing import List

import pytest

from conftest import DATA
from harness import console, judge, qemu


def _run(lines: List[str], outcome: qemu.Outcome = qemu.Outcome.POWERED_OFF,
         message: str = "") -> qemu.Run:
    return qemu.Run(qemu.Machine(kernel=Path("k"), initrd=Path("i")), outcome, 1.0,
                    console.parse(lines), Path("x.log"), 0, message)


def _steps(*steps: str, extra: List[str] = ()) -> List[str]:
    out = ["KTAP version 1", f"1..{len(steps)}"]
    for n, s in enumerate(steps, 1):
        out += [f"# XH-STEP-BEGIN {s}", *extra, f"ok {n} {s}"]
    return out + ["# XH-DONE"]


def _ktap(*cases: str, plan: int = 0) -> List[str]:
    return (["KTAP version 1", "1..1", "    KTAP version 1", "    # Subtest: xpfo",
             f"    1..{plan or len(cases)}"]
            + [f"    {c}" for c in cases] + ["ok 1 xpfo"])


def test_clean_boot_succeeds():
    v = judge.boot(_run(_steps("info", "vmstat")))
    assert v.passed and v.status is judge.Status.SUCCESS and v.reasons == ()


def test_runner_that_died_midway_is_a_crash():
    lines = _steps("info", "stress:5")[:-2]  # no 'ok 2', no XH-DONE
    v = judge.boot(_run(lines, qemu.Outcome.CRASHED, "guest stopped"))
    assert v.status is judge.Status.CRASHED
    assert "1 of 2 steps reported" in v.reasons[0]


@pytest.mark.parametrize("report", ["WARNING: CPU: 1 PID: 7 at mm/xpfo.c:10 f+0x1/0x2",
                                    "Oops: 0000 [#1] PREEMPT SMP NOPTI",
                                    "BUG: sleeping function called from invalid context"])
def test_any_kernel_report_anywhere_fails_a_benchmark_boot(report):
    for where in ("boot", "step"):
        lines = _steps("sh:xbench")
        if where == "boot":
            lines = [f"[    0.5] {report}"] + lines
        else:
            lines.insert(3, f"[    9.1] {report}")
        v = judge.bench_boot(_run(lines))
        assert v.status is judge.Status.FAILURE, where
        assert report.split(":")[0] in v.reasons[0]


def test_expected_xpfo_oops_is_allowed_only_in_its_step():
    con_lines = (DATA / "xpfo_sync.log").read_text().splitlines()
    run = _run(con_lines)
    assert not judge.boot(run).passed
    assert judge.boot(run, allowed_steps=["lkdtm:XPFO_READ_USER"]).passed
    # and any other report in that step is not excused
    other = _steps("lkdtm:X", extra=["[ 1.0] WARNING: CPU: 0 PID: 1 at mm/x.c:1 f"])
    assert not judge.boot(_run(other), allowed_steps=["lkdtm:X"]).passed


def test_step_exit_status_and_unreadable_results_fail():
    lines = ["KTAP version 1", "1..1", "# XH-STEP-BEGIN disk", "RESULT {bad",
             "not ok 1 disk # exit 1", "# XH-DONE"]
    v = judge.boot(_run(lines))
    assert v.status is judge.Status.FAILURE
    assert any("step disk exited with status 1" in r for r in v.reasons)
    assert any("unreadable result" in r for r in v.reasons)
    # a benchmark judges its workloads' exits itself
    assert judge.bench_boot(_run(lines)).reasons == v.reasons[:1]


def test_kunit_in_a_protecting_mode():
    ok = console.parse(_ktap("ok 1 a", "ok 2 xpfo_test_batch_reuse # SKIP needs xpfo=batched"))
    assert judge.kunit(ok, "sync").passed
    # the batched-only case must run in batched mode
    assert not judge.kunit(ok, "batched").passed
    failed = console.parse(_ktap("not ok 1 a", "ok 2 b"))
    assert "a failed" in judge.kunit(failed, "deferred").reasons[0]
    assert not judge.kunit(console.parse(_ktap("ok 1 a # SKIP off")), "sync").passed


def test_kunit_case_that_needs_pgtprot_sections_too():
    skipped = console.parse(_ktap("ok 1 a", "ok 2 xpfo_test_slots_one_window # SKIP needs pgtprot"))
    # XPFO on, pgtprot off or eager: the case may skip
    assert judge.kunit(skipped, "strict").passed
    assert judge.kunit(skipped, "sync").passed
    # XPFO on and pgtprot batched: it must run
    v = judge.kunit(skipped, "strict+pgt-batched")
    assert not v.passed and "xpfo_test_slots_one_window skipped" in v.reasons[0]
    assert judge.kunit(console.parse(_ktap("ok 1 a", "ok 2 xpfo_test_slots_one_window")),
                       "strict+pgt-batched").passed


def test_kunit_case_whose_scenario_may_not_arise_in_strict():
    skipped = console.parse(_ktap("ok 1 a", "ok 2 xpfo_test_remote_order4 # SKIP another block"))
    # strict: the freed block may never come back; not a failure
    assert judge.kunit(skipped, "strict").passed
    assert judge.kunit(skipped, "strict+pgt-batched").passed
    # sync gives it back at once: a skip there fails
    v = judge.kunit(skipped, "sync")
    assert not v.passed and "xpfo_test_remote_order4 skipped" in v.reasons[0]
    # and a failure fails in strict too
    failed = console.parse(_ktap("ok 1 a", "not ok 2 xpfo_test_remote_order4"))
    assert not judge.kunit(failed, "strict").passed


def test_kunit_must_skip_itself_when_off():
    assert judge.kunit(console.parse(_ktap("ok 1 a # SKIP off", "ok 2 b # SKIP off")),
                       "off").passed
    v = judge.kunit(console.parse(_ktap("ok 1 a", "ok 2 b # SKIP off")), "off")
    assert not v.passed and "must skip itself" in v.reasons[0]
    # a failure counts in every mode (cmd_test used to ignore KUnit with off)
    assert not judge.kunit(console.parse(_ktap("not ok 1 a")), "off").passed


def test_kunit_that_did_not_run_or_stopped_early_fails():
    assert "did not run" in judge.kunit(console.parse([]), "sync").reasons[0]
    v = judge.kunit(console.parse(_ktap("ok 1 a", plan=12)), "sync")
    assert "1 of its 12 cases reported" in v.reasons[0]


def test_kunit_counts_only_the_xpfo_suite():
    con = console.parse((DATA / "ktap_kunit.log").read_text().splitlines())
    assert judge.kunit_counts(con) == {"pass": 14, "fail": 0, "skip": 1}
    assert judge.kunit(con, "sync").passed and not judge.kunit(con, "batched").passed


def test_attack_run_judges_attacks_kunit_and_the_boot_together():
    lines = (DATA / "xpfo_off.log").read_text().splitlines()
    j = judge.attack_run(_run(lines), "off", cpus=1, with_kunit=False)
    # the other attacks never ran in this short log
    assert not j.verdict.passed
    assert [v.passed for v in j.tests if v.test == "XPFO_READ_USER"] == [True]
    assert any("XPFO_READ_USER_HUGE" in r for r in j.verdict.reasons)
    with_kunit = judge.attack_run(_run(lines), "off", cpus=1)
    assert any("KUnit xpfo suite, xpfo=off: did not run" in r
               for r in with_kunit.verdict.reasons)


def test_stress_run_needs_the_programs_own_pass():
    lines = _steps("stress:5")
    lines.insert(3, 'RESULT {"worker": "all", "failed": 1, "status": "fail"}')
    v = judge.stress_run(_run(lines), "stress:5")
    assert not v.passed and "stress reported fail (1 workers failed)" in v.reasons


def _stress_with(audit: str, hotplug: str = '{"tried": 3, "cycled": 2, "online_failed": 0, '
                 '"mapped_back": 40}') -> qemu.Run:
    lines = _steps("stress:5", "audit:stress", "hotplug", "audit:hotplug")
    lines.insert(3, 'RESULT {"worker": "all", "failed": 0, "status": "pass"}')
    lines.insert(lines.index("# XH-STEP-BEGIN hotplug") + 1, f'RESULT {{"hotplug": {hotplug}}}')
    for label in ("stress", "hotplug"):
        at = lines.index(f"# XH-STEP-BEGIN audit:{label}") + 1
        lines.insert(at, f'RESULT {{"label": "{label}", "audit": {audit}}}')
    return _run(lines)


def test_stress_run_passes_on_a_clean_audit_and_no_xpfo():
    clean = '{"frames": 131000, "mapped_user": 0, "absent_kernel": 0, "absent_other": 2}'
    assert judge.stress_run(_stress_with(clean), "stress:5").passed
    # a kernel without XPFO (vanilla) has nothing to audit
    assert judge.stress_run(_stress_with("null"), "stress:5").passed
    assert judge.audits(_stress_with("null").console) == {"stress": None, "hotplug": None}


def test_stress_run_fails_on_a_frame_the_audit_finds():
    leak = '{"frames": 131000, "mapped_user": 3, "absent_kernel": 0, "absent_other": 0}'
    v = judge.stress_run(_stress_with(leak), "stress:5")
    assert not v.passed
    assert "direct-map audit after stress: mapped_user 3" in v.reasons
    lost = '{"frames": 131000, "mapped_user": 0, "absent_kernel": 512, "absent_other": 0}'
    v = judge.stress_run(_stress_with(lost), "stress:5")
    assert "direct-map audit after hotplug: absent_kernel 512" in v.reasons


def test_stress_run_checks_the_kept_count_against_the_free_lists():
    kept = ('{"frames": 131000, "mapped_user": 0, "absent_kernel": 0, "absent_other": 0, '
            '"kept": 40000, "kept_counted": %d}')
    assert judge.stress_run(_stress_with(kept % 39990), "stress:5").passed
    v = judge.stress_run(_stress_with(kept % 30000), "stress:5")
    assert not v.passed
    assert ("direct-map audit after stress: 40000 kept frames on the free lists, "
            "the running count says 30000") in v.reasons
    # frames in flight at the first reading: the second one decides
    first = (kept % 39700)[:-1]
    settled = first + ', "kept_reread": 40100, "kept_counted_reread": 40100}'
    assert judge.stress_run(_stress_with(settled), "stress:5").passed
    stays = first + ', "kept_reread": 40000, "kept_counted_reread": 39700}'
    v = judge.stress_run(_stress_with(stays), "stress:5")
    assert not v.passed and any("(read twice)" in r for r in v.reasons)


def test_stress_run_fails_when_no_memory_block_was_cycled():
    clean = '{"frames": 1, "mapped_user": 0, "absent_kernel": 0, "absent_other": 0}'
    none = '{"tried": 3, "cycled": 0, "online_failed": 0, "mapped_back": 0}'
    v = judge.stress_run(_stress_with(clean, none), "stress:5")
    assert "hotplug: no memory block was offlined and onlined again" in v.reasons


def test_worst_keeps_every_reason_and_the_worst_status():
    v = judge.worst([judge.SUCCESS, judge.Verdict(judge.Status.FAILURE, ("a",)),
                     judge.Verdict(judge.Status.CRASHED, ("b",))])
    assert v.status is judge.Status.CRASHED and v.reasons == ("a", "b")
    assert judge.worst([]).passed
    assert v.to_dict() == {"status": "crashed", "reasons": ["a", "b"]}


def test_failed_benchmark_cells_fail_the_run():
    v = judge.bench_failures([{"workload": "fork", "mode": "sync", "cpus": 2,
                               "reason": "oops: BUG: x"}])
    assert v.reasons == ("benchmark fork xpfo=sync 2 vCPUs: oops: BUG: x",)
    assert judge.bench_failures([]).passed


def _fake_guest(monkeypatch, lines: List[str]) -> None:
    from harness import attack_runs, build, guest
    monkeypatch.setattr(build, "ensure_kernel", lambda *a, **kw: None)
    monkeypatch.setattr(attack_runs, "write_json", lambda path, data: None)
    monkeypatch.setattr(guest, "run", lambda req, **kw: _run(lines))


def _attack_log(kunit: List[str]) -> List[str]:
    # every attack step runs and the runner finishes: only KUnit decides
    text = (DATA / "xpfo_off.log").read_text()
    return (_ktap(*kunit) + _ktap_suite("xpfo_global", "ok 1 global_case")
            + text.splitlines())


def test_cmd_test_fails_on_kunit_with_xpfo_off(monkeypatch, capsys):
    from harness import attacks, cli
    monkeypatch.setattr(attacks, "judge_all", lambda con, mode, cpus, disk=True, pks=True: [])
    monkeypatch.setattr(attacks, "judge_predict", lambda con, mode: [])
    _fake_guest(monkeypatch, _attack_log(["ok 1 a # SKIP off"]))
    assert cli.main(["test", "--modes", "off"]) == 0
    _fake_guest(monkeypatch, _attack_log(["not ok 1 a"]))
    assert cli.main(["test", "--modes", "off"]) == 1
    assert "FAIL xpfo=off: KUnit xpfo suite, xpfo=off: a failed" in capsys.readouterr().out


def test_cmd_demo_fails_on_kunit_and_on_benchmark_failures(monkeypatch, capsys):
    from types import SimpleNamespace

    from harness import attacks, cli
    from harness import bench as bench_
    monkeypatch.setattr(attacks, "judge_all", lambda con, mode, cpus, disk=True, pks=True: [])
    monkeypatch.setattr(attacks, "judge_predict", lambda con, mode: [])
    bench = SimpleNamespace(failures=[])
    benched = []
    monkeypatch.setattr(bench_, "run_and_report",
                        lambda modes, *a, **kw: benched.append(list(modes)) or bench)
    good = {"off": ["ok 1 a # SKIP off"], "on": ["ok 1 a"]}
    booted = []

    def run(req, **kw):
        mode = req.params[0].split("=")[1]
        booted.append(" ".join(p for p in req.params if p.startswith(("xpfo=", "pgtprot="))))
        lines = _attack_log(good["off" if mode == "off" else "on"])
        if any(p.startswith("pgtprot=") for p in req.params):
            lines = _ktap_suite("pgtprot", "ok 1 a") + lines
        return _run(lines)

    _fake_guest(monkeypatch, [])
    from harness import guest
    monkeypatch.setattr(guest, "run", run)
    assert cli.main(["demo"]) == 0
    # every XPFO mode, then the recommended configuration, in the attack
    # boots and in the quick benchmark
    assert booted == ["xpfo=off", "xpfo=sync", "xpfo=deferred", "xpfo=batched", "xpfo=strict",
                      "xpfo=strict pgtprot=batched"]
    assert benched == [["off", "sync", "deferred", "batched", "strict", "strict+pgt-batched"]]
    out = capsys.readouterr().out
    assert "| xpfo=strict | xpfo=strict pgtprot=batched (recommended) |" in out
    for stage in ("build", "attack boots", "bench"):
        assert re.search(rf"\[demo\] {stage}: done in \d+m\d\ds", out), stage
    assert re.search(r"\[demo\] 6 attack boots, ~\d+m\d\ds each: ~\d+m\d\ds estimated", out)
    assert re.search(r"quick side-by-side benchmark of the modes: 12 boots, ~\d+m\d\ds "
                     r"estimated", out)
    booted.clear()
    good["on"] = ["not ok 1 a"]
    assert cli.main(["demo"]) == 1
    good["on"] = ["ok 1 a"]
    bench.failures = [{"workload": "fork", "mode": "sync", "cpus": 2, "reason": "WARNING: x"}]
    assert cli.main(["demo"]) == 1
    assert "FAIL: benchmark fork xpfo=sync 2 vCPUs: WARNING: x" in capsys.readouterr().out


def _ktap_suite(suite: str, *cases: str) -> List[str]:
    return (["KTAP version 1", "1..1", "    KTAP version 1", f"    # Subtest: {suite}",
             f"    1..{len(cases)}"] + [f"    {c}" for c in cases] + [f"ok 1 {suite}"])


def test_global_kunit_suite_must_pass_in_every_mode():
    ok = console.parse(_ktap_suite("xpfo_global", "ok 1 a", "ok 2 b"))
    for mode in ("off", "sync", "strict", "pgt-batched"):
        assert judge.kunit_global(ok, mode).passed
    failed = console.parse(_ktap_suite("xpfo_global", "ok 1 a", "not ok 2 b"))
    v = judge.kunit_global(failed, "off")
    assert not v.passed and "b failed" in v.reasons[0]
    skipped = console.parse(_ktap_suite("xpfo_global", "ok 1 a # SKIP why"))
    assert "a skipped" in judge.kunit_global(skipped, "strict").reasons[0]
    assert "did not run" in judge.kunit_global(console.parse([]), "off").reasons[0]


def test_global_image_case_may_skip_only_under_pti():
    suite = _ktap_suite("xpfo_global", "ok 1 a", "ok 2 xpfo_global_test_image # SKIP PTI")
    pti = ["[    0.000000] Kernel/User page tables isolation: force enabled on command line"]
    assert judge.kunit_global(console.parse(pti + suite), "strict+nonglobal").passed
    v = judge.kunit_global(console.parse(suite), "strict")
    assert not v.passed and "xpfo_global_test_image skipped" in v.reasons[0]
    other = _ktap_suite("xpfo_global", "ok 1 a # SKIP PTI", "ok 2 xpfo_global_test_image")
    assert not judge.kunit_global(console.parse(pti + other), "strict").passed


def _global_run(secret: str, audit: str) -> List[str]:
    return ["KTAP version 1", "1..2",
            "# XH-STEP-BEGIN sh:secret", f"RESULT {secret}", "ok 1 sh:secret",
            "# XH-STEP-BEGIN audit:cpa", f"RESULT {audit}", "ok 2 audit:cpa", "# XH-DONE"]


def test_global_stray_entries_after_memfd_secret_fail_the_run():
    secret = '{"secret": {"pages": 256, "rounds": 4, "status": "pass"}}'
    clean = '{"label": "cpa", "audit": {"frames": 9, "global_stray": 0}}'
    stray = '{"label": "cpa", "audit": {"frames": 9, "global_stray": 1024}}'
    assert judge.global_reasons(console.parse(_global_run(secret, clean))) == []
    r = judge.global_reasons(console.parse(_global_run(secret, stray)))
    assert len(r) == 1 and "global_stray 1024" in r[0]
    # no memfd_secret in the kernel is not a failure; a failed program is
    none = '{"secret": {"pages": 256, "rounds": 4, "status": "unsupported"}}'
    assert judge.global_reasons(console.parse(_global_run(none, clean))) == []
    bad = '{"secret": {"pages": 256, "rounds": 4, "status": "fail"}}'
    assert "sh:secret: fail" in judge.global_reasons(console.parse(_global_run(bad, clean)))[0]
    # an audit that did not report counts as a failure, not a pass
    missing = console.parse(_global_run(secret, '{"label": "other", "audit": {}}'))
    assert any("global_stray None" in x for x in judge.global_reasons(missing))
    # and the stress audits count it too
    assert any("global_stray 1024" in x
               for x in judge.audit_reasons(console.parse(_global_run(secret, stray))))
