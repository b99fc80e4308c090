"""Console parsing, pinned by saved logs: tests/test_data holds real captures
(6.12 + the series under QEMU, the runner's output kept whole, the boot
messages before it trimmed to the kernel's version, command line and mode)."""

from conftest import DATA
from harness import console


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
    assert "lkdtm_PANIC" in inc.text()
    assert con.planned == 3 and con.reported == 1 and not con.runner_finished()


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
             "INFO: task sh:12 blocked for more than 120 seconds.",
             "[   46.600057] Unexpected gfp: 0x2 (__GFP_HIGHMEM). Fixing up to gfp: 0x508d48",
             "[   61.020345] pagealloc: memory corruption"]
    con = console.Parser()
    for line in lines:
        con.feed(line)
        con.feed("---[ end trace 0000000000000000 ]---")
    kinds = [i.kind for i in con.console.incidents]
    assert kinds == ["warning", "gpf", "bug", "ubsan", "rcu-stall", "hung-task", "bad-gfp",
                     "page-poison"]


def test_ktap_cases_and_skips():
    con = _parse("ktap_kunit.log")
    got = [(c.suite, c.name, c.status) for c in con.ktap]
    assert len(got) == con.ktap_plans["xpfo"] == 15
    assert got[3] == ("xpfo", "xpfo_test_user_alloc_unmaps", "pass")
    assert [c for c in got if c[2] != "pass"] == [("xpfo", "xpfo_test_batch_reuse", "skip")]
    # KUnit's top-level 'ok 1 xpfo' is not a step, and the runner's plan is its own
    assert con.planned == 3 and list(con.steps) == ["info"]


def test_bad_result_line_is_recorded_not_raised():
    con = console.parse(["XH-STEP-BEGIN x", "RESULT {not json}", "RESULT [1]",
                         "XH-STEP-END x 0"])
    assert len(con.errors) == 2
    assert con.steps["x"].results == []


def test_ktap_framed_steps_and_results_from_the_second_port():
    con = console.parse([
        "KTAP version 1", "1..2",
        "# XH-STEP-BEGIN info",
        'XH-RESULT info {"cpus": 2}',
        "ok 1 info",
        "# XH-STEP-BEGIN disk",
        "[    2.000000] EXT4-fs (vda): mounted",
        "not ok 2 disk # exit 3",
        'XH-RESULT disk {"status": "error"}',   # the ports are not in step
        "# XH-DONE"])
    assert con.planned == 2 and con.reported == 2 and con.runner_finished()
    assert con.steps["info"].results == [{"cpus": 2}]
    assert con.steps["info"].ended and con.steps["info"].exit_status == 0
    assert con.steps["disk"].exit_status == 3
    assert con.steps["disk"].results == [{"status": "error"}]
    assert con.order == ["info", "disk"] and con.errors == []


def test_runner_that_stopped_midway_has_fewer_results_than_its_plan():
    con = console.parse(["KTAP version 1", "1..3", "# XH-STEP-BEGIN info", "ok 1 info",
                         "# XH-STEP-BEGIN lkdtm:PANIC",
                         "[    3.1] Kernel panic - not syncing: dumptest"])
    assert con.planned == 3 and con.reported == 1
    assert not con.runner_finished()
    assert not con.steps["lkdtm:PANIC"].ended


def test_kunit_plan_is_not_the_runners():
    # KUnit's KTAP document comes first; its top-level 'ok 1 xpfo' ends no step
    con = console.parse(["KTAP version 1", "1..1", "    KTAP version 1",
                         "    # Subtest: xpfo", "    1..2", "    ok 1 a", "    ok 2 b",
                         "ok 1 xpfo", "KTAP version 1", "1..1", "# XH-STEP-BEGIN xpfo",
                         "ok 1 xpfo", "# XH-DONE"])
    assert con.ktap_plans == {"xpfo": 2}
    assert [c.name for c in con.ktap] == ["a", "b"]
    assert con.planned == 1 and con.reported == 1 and con.runner_finished()


def test_old_framing_is_still_understood():
    con = console.parse(["XH-STEP-BEGIN x", 'RESULT {"a": 1}', "XH-STEP-END x 2", "XH-DONE"])
    assert con.planned is None and con.runner_finished()
    assert con.steps["x"].results == [{"a": 1}] and con.steps["x"].exit_status == 2


def test_result_port_lines_are_not_part_of_an_incident():
    con = console.parse(["# XH-STEP-BEGIN x", "[ 1.0] WARNING: CPU: 0 PID: 1 at f",
                         'XH-RESULT x {"note": "WARNING: in a value"}', "ok 1 x"])
    [inc] = con.incidents
    assert all("XH-RESULT" not in line for line in inc.lines)
    assert con.steps["x"].results == [{"note": "WARNING: in a value"}]


def test_result_line_cut_on_the_console_is_an_error_not_mended():
    # only old logs and guests without a second port have RESULT on the console
    con = console.parse(['XH-STEP-BEGIN x', 'RESULT {"a": [    2.000000] msg', '1]}',
                         "XH-STEP-END x 0"])
    assert len(con.errors) == 1 and con.steps["x"].results == []
    assert con.steps["x"].ended


def test_step_end_on_the_results_port_counts_a_cut_ok_line():
    # a kernel message from another CPU lands inside the runner's "ok" line
    con = console.parse(["KTAP version 1", "1..2", "# XH-STEP-BEGIN info", "ok 1 info",
                         "# XH-STEP-BEGIN vmstat",
                         'XH-RESULT vmstat {"counters": {}}', "XH-END 2 vmstat 0",
                         "ok 22 vm[   44.9] ACPI: PM: Preparing to enter system sleep state S5",
                         "stat", "# XH-DONE"])
    assert con.planned == 2 and con.reported == 2 and con.runner_finished()
    assert con.steps["vmstat"].ended and con.steps["vmstat"].exit_status == 0


def test_step_reported_on_both_ports_counts_once_and_keeps_its_lines():
    # the port's end can be read before the console's last lines of the step:
    # those still belong to the step (an oops the step expects stays in it)
    con = console.parse(["KTAP version 1", "1..3", "# XH-STEP-BEGIN x", "XH-END 1 x 0",
                         "[ 1.0] BUG: unable to handle page fault for address: ff1",
                         "---[ end trace 0000000000000000 ]---", "ok 1 x",
                         "# XH-STEP-BEGIN y", "not ok 2 y # exit 3", "XH-END 2 y 3"])
    assert con.reported == 2 and not con.runner_finished()
    [inc] = con.incidents
    assert inc.step == "x"
    assert con.steps["y"].exit_status == 3


def test_results_port_read_before_the_console_keeps_the_plan():
    # the two ports are followed by two threads: the first step's results
    # and end can be parsed before the console's plan and first step begin
    con = console.parse(['XH-RESULT info {"cpus": 2}', "XH-END 1 info 0",
                         "KTAP version 1", "1..1", "# XH-STEP-BEGIN info",
                         "ok 1 i[   44.9] reboot: Power down"])
    assert con.planned == 1 and con.reported == 1 and con.runner_finished()
    assert con.steps["info"].results == [{"cpus": 2}]
    assert con.order == ["info"]
