"""Console parsing, pinned by saved logs."""

from harness import console
from conftest import DATA


def _parse(name: str) -> console.Console:
    return console.parse((DATA / name).read_text().splitlines())


def test_strip_timestamp_and_level():
    assert console.strip("[    4.003000] BUG: x\r\n") == "BUG: x"
    assert console.strip("<4>[12345.000001] WARNING: y") == "WARNING: y"
    assert console.strip("plain") == "plain"


def test_panic_mid_run_is_an_incident_and_the_step_never_ends():
    con = _parse("panic_midrun.log")
    assert con.steps["info"].results[0]["xpfo_mode"] == "sync"
    assert con.steps["info"].ended and con.steps["info"].exit_status == 0
    step = con.steps["lkdtm:PANIC"]
    assert not step.ended
    assert not con.done
    [inc] = con.incidents
    assert inc.kind == "panic" and inc.step == "lkdtm:PANIC"
    assert "dump_stack_lvl" in inc.text()


def test_oops_is_attributed_to_its_step_with_its_trace():
    con = _parse("xpfo_sync.log")
    [inc] = con.incidents
    assert inc.kind == "bug"
    assert inc.step == "lkdtm:XPFO_READ_USER"
    assert inc.mentions("xpfo: kernel access to user-owned frame")
    assert any("RIP:" in line for line in inc.lines)
    assert con.done


def test_every_kind_of_kernel_report_is_caught():
    lines = ["WARNING: CPU: 0 PID: 1 at mm/x.c:1 f+0x1/0x2",
             "general protection fault, probably for non-canonical address",
             "BUG: KASAN: use-after-free in f",
             "UBSAN: array-index-out-of-bounds in x.c:3:4",
             "rcu: INFO: rcu_preempt self-detected stall on CPU",
             "INFO: task sh:12 blocked for more than 120 seconds."]
    con = console.Parser()
    for line in lines:
        con.feed(line)
        con.feed("---[ end trace 0000000000000000 ]---")
    kinds = [i.kind for i in con.console.incidents]
    assert kinds == ["warning", "gpf", "bug", "ubsan", "rcu-stall", "hung-task"]


def test_ktap_cases_and_skips():
    con = _parse("ktap_kunit.log")
    got = [(c.suite, c.name, c.status) for c in con.ktap]
    assert got == [("xpfo", "xpfo_test_user_alloc_unmaps", "pass"),
                   ("xpfo", "xpfo_test_kmap_atomic", "fail"),
                   ("xpfo", "xpfo_test_migrate", "skip")]


def test_bad_result_line_is_recorded_not_raised():
    con = console.parse(["XH-STEP-BEGIN x", "RESULT {not json}", "RESULT [1]",
                         "XH-STEP-END x 0"])
    assert len(con.errors) == 2
    assert con.steps["x"].results == []


def test_result_line_cut_by_kernel_messages_is_put_back_together():
    # seen in a benchmark log: printk wrote in the middle of userspace's line
    con = console.parse([
        "XH-STEP-BEGIN vmstat:start",
        'RESULT {"label": "start", "counters": {[    1.975890] tsc: Refined TSC '
        "clocksource calibration: 1999.977 MHz",
        "[    1.979365] clocksource: tsc: mask: 0xffffffffffffffff",
        "[    1.983780] clocksource: Switched to clocksource tsc",
        '"pgfault": 906, "xpfo_unmap": 1391}}',
        "XH-STEP-END vmstat:start 0"])
    assert con.errors == []
    assert con.steps["vmstat:start"].results == [
        {"label": "start", "counters": {"pgfault": 906, "xpfo_unmap": 1391}}]
    assert con.steps["vmstat:start"].ended


def test_result_line_cut_and_never_completed_is_an_error():
    con = console.parse(['XH-STEP-BEGIN x', 'RESULT {"a": [    2.000000] msg',
                         "XH-STEP-END x 0"])
    assert len(con.errors) == 1 and con.steps["x"].results == []
    assert con.steps["x"].ended
