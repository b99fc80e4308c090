"""Benchmark statistics, result collection (including failed cells) and reports."""

from pathlib import Path

from harness import bench, console, qemu, report, stats


def test_paired_ratios_follow_direction_and_skip_missing_rounds():
    # time-like: lower is better -> mode/base
    assert stats.paired_ratios({0: 2.0, 1: 3.0}, {0: 1.0, 1: 2.0}, "lower") == [2.0, 1.5]
    # throughput: higher is better -> base/mode
    assert stats.paired_ratios({0: 50.0}, {0: 100.0}, "higher") == [2.0]
    # a round missing on one side is left out, not averaged
    assert stats.paired_ratios({0: 1.0, 1: 1.0}, {1: 1.0}, "lower") == [1.0]
    sm = stats.summarize([3.0, 1.0, 2.0])
    assert (sm.median, sm.lo, sm.hi, sm.n) == (2.0, 1.0, 3.0, 3)
    assert stats.summarize([]) is None
    assert stats.per_thousand(5, 0) is None and stats.per_thousand(5, 1000) == 5.0


REQ = bench.BenchRequest(modes=["off", "sync"], cpus=[1], rounds=1,
                         workloads=[bench.Workload("sh:xbench:mmap:8", ("mmap", "munmap")),
                                    bench.Workload("sh:xbench:lseek", ("lseek",))])


def _run(lines, outcome=qemu.Outcome.POWERED_OFF) -> qemu.Run:
    m = qemu.Machine(kernel=Path("k"), initrd=Path("i"))
    return qemu.Run(m, outcome, 1.0, console.parse(lines), Path("log"))


GOOD = [
    "XH-STEP-BEGIN vmstat:start",
    'RESULT {"label": "start", "counters": {"xpfo_unmap": 10, "xpfo_flush_ipi_sent": 1}}',
    "XH-STEP-END vmstat:start 0",
    "XH-STEP-BEGIN sh:xbench:mmap:8",
    'RESULT {"workload": "mmap", "value": 4.0, "unit": "ms", "better": "lower", "seconds": 1, '
    '"user_pages": 2048}',
    'RESULT {"workload": "munmap", "value": 1.0, "unit": "ms", "better": "lower", "seconds": 1, '
    '"user_pages": 0}',
    "XH-STEP-END sh:xbench:mmap:8 0",
    "XH-STEP-BEGIN vmstat:0",
    'RESULT {"label": "0", "counters": {"xpfo_unmap": 2058, "xpfo_flush_ipi_sent": 2049}}',
    "XH-STEP-END vmstat:0 0",
    "XH-STEP-BEGIN sh:xbench:lseek",
    'RESULT {"workload": "lseek", "value": 100000, "unit": "calls/s", "better": "higher", '
    '"seconds": 1, "user_pages": 0}',
    "XH-STEP-END sh:xbench:lseek 0",
    "XH-STEP-BEGIN vmstat:1",
    'RESULT {"label": "1", "counters": {"xpfo_unmap": 2060, "xpfo_flush_ipi_sent": 2051}}',
    "XH-STEP-END vmstat:1 0",
    "XH-DONE",
]


def test_collect_counts_events_per_workload():
    data = bench.BenchData()
    bench.collect(_run(GOOD), REQ, "sync", 1, 0, data)
    assert not data.failures
    mmap = next(s for s in data.samples if s["workload"] == "mmap")
    assert mmap["counters"]["xpfo_unmap"] == 2048
    assert stats.per_thousand(mmap["counters"]["xpfo_flush_ipi_sent"], mmap["user_pages"]) == 1000


def test_oops_anywhere_in_the_boot_fails_every_cell_of_it():
    # an oops in the last workload fails the earlier workloads' cells too
    cut = GOOD[:10] + ["XH-STEP-BEGIN sh:xbench:lseek", "BUG: unable to handle page fault",
                       "---[ end trace 0000000000000000 ]---"]
    data = bench.BenchData()
    bench.collect(_run(cut, qemu.Outcome.CRASHED), REQ, "sync", 1, 0, data)
    assert data.samples == []
    assert {f["workload"] for f in data.failures} == {"mmap", "munmap", "lseek"}
    assert all(f["reason"].startswith("bug in sh:xbench:lseek:") for f in data.failures)


def test_warning_in_a_step_that_went_on_fails_the_boot():
    warned = GOOD[:4] + ["WARNING: CPU: 0 PID: 1 at mm/xpfo.c:10 xpfo_unmap+0x1/0x2",
                         "---[ end trace 0000000000000000 ]---"] + GOOD[4:]
    data = bench.BenchData()
    bench.collect(_run(warned), REQ, "sync", 1, 0, data)
    assert data.samples == [] and len(data.failures) == 3
    assert all("warning in sh:xbench:mmap:8" in f["reason"] for f in data.failures)


def test_timeout_without_a_kernel_report_keeps_the_finished_cells():
    cut = GOOD[:10] + ["XH-STEP-BEGIN sh:xbench:lseek"]
    data = bench.BenchData()
    bench.collect(_run(cut, qemu.Outcome.TIMEOUT), REQ, "sync", 1, 0, data)
    assert {s["workload"] for s in data.samples} == {"mmap", "munmap"}
    [fail] = data.failures
    assert fail["workload"] == "lseek" and fail["reason"] == "guest timeout"


def test_report_has_ratios_counters_and_failed_cells(tmp_path):
    data = bench.BenchData(meta={"modes": ["off", "sync"], "cpus": [1]})
    bench.collect(_run(GOOD), REQ, "sync", 1, 0, data)
    off = [x.replace('"value": 4.0', '"value": 2.0') for x in GOOD]
    bench.collect(_run(off), REQ, "off", 1, 0, data)
    data.failures.append({"mode": "sync", "cpus": 1, "round": 1, "workload": "lseek",
                          "reason": "guest timeout"})
    text = report.tables(data)
    assert "| mmap | ms |" in text and "2.00x" in text
    assert "guest timeout" in text
    written = report.plots(data, tmp_path)
    assert all(p.exists() and p.stat().st_size > 1000 for p in written)


def test_window_percentiles_from_log2_buckets():
    buckets = {1024: 50, 4096: 49, 1 << 20: 1}
    assert stats.log2_percentile(buckets, 0.5) == 1024
    assert stats.log2_percentile(buckets, 0.99) == 4096
    assert stats.log2_percentile(buckets, 1.0) == 1 << 20
    assert stats.log2_percentile({}, 0.5) is None


def test_window_result_is_collected_and_reported():
    lines = GOOD[:-1] + ["XH-STEP-BEGIN window",
                         'RESULT {"window": {"buckets": {"2048": 3}, "count": 3, "max_ns": 1900}}',
                         "XH-STEP-END window 0", "XH-DONE"]
    data = bench.BenchData(meta={"modes": ["off", "deferred"], "cpus": [1]})
    bench.collect(_run(lines), REQ, "deferred", 1, 0, data)
    assert data.windows[0]["count"] == 3
    assert "| deferred | 1 | 3 | 2.0 us | 2.0 us | 1.9 us |" in report.tables(data)


def test_event_counts_are_normalised_by_user_pages_handed_out():
    s = {"user_pages": 0, "counters": {"xpfo_user_pages": 4000, "xpfo_unmap": 100,
                                       "xpfo_skip_atomic": 0}}
    # batched mode reuses unmapped frames: the unmaps are not the denominator
    assert report.user_pages(s) == 4000
    # the workload's own figure comes first, in every mode alike
    assert report.user_pages(dict(s, user_pages=2048)) == 2048
    # logs of kernels without the counter
    old = {"user_pages": 0, "counters": {"xpfo_unmap": 100, "xpfo_skip_atomic": 2}}
    assert report.user_pages(old) == 102
    # XPFO off (pgtprot alone): no user page is counted, the faults stand in
    pgt = {"user_pages": 0, "counters": {"xpfo_user_pages": 0, "pgfault": 5000}}
    assert report.user_pages(pgt) == 5000


def test_crash_at_boot_names_the_report_in_every_cell():
    boot = ["Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
            "RIP: 0010:sched_clock_idle_wakeup_event+0x5/0x30",
            "Kernel panic - not syncing: Fatal exception in interrupt"]
    data = bench.BenchData()
    bench.collect(_run(boot, qemu.Outcome.CRASHED), REQ, "off", 2, 2, data)
    assert data.samples == [] and len(data.failures) == 3
    assert all(f["reason"].startswith("oops outside any step: Oops: int3")
               for f in data.failures)


def test_operations_timed_by_a_fork_or_munmap_sample():
    # 40 forks of 50 ms each in 2 s, 25 munmaps of 80 ms; any other unit
    # times no operation
    assert report.ops({"unit": "us/fork", "value": 50000.0, "seconds": 2.0}) == 40
    assert report.ops({"unit": "ms/munmap", "value": 80.0, "seconds": 2.0}) == 25
    assert report.ops({"unit": "pages/s", "value": 80.0, "seconds": 2.0}) == 0
    assert report.ops({"unit": "us/fork", "value": 0, "seconds": 2.0}) == 0


def test_icount_report_counts_instructions_per_page():
    # with --icount, "seconds" is guest instructions / 1e9: mmap ran 1e9
    # instructions in off and 1.25e9 in sync over 2048 pages
    data = bench.BenchData(meta={"modes": ["off", "sync"], "cpus": [1], "icount": True})
    bench.collect(_run(GOOD), REQ, "off", 1, 0, data)
    sync = [x.replace('"value": 4.0, "unit": "ms", "better": "lower", "seconds": 1,',
                      '"value": 5.0, "unit": "ms", "better": "lower", "seconds": 1.25,')
            for x in GOOD]
    bench.collect(_run(sync), REQ, "sync", 1, 0, data)
    text = report.tables(data)
    assert text.startswith(report.ICOUNT_NOTE)
    assert "| mmap | 1 | xpfo=off | 1,000.0 | 488,281 | - |" in text
    assert "| mmap | 1 | xpfo=sync | 1,250.0 | 610,352 | 1.250x |" in text
    # a workload that touches no pages of its own has no per-page figure
    assert "| lseek | 1 | xpfo=sync | 1,000.0 | - | 1.000x |" in text
    # without --icount the section is not there
    data.meta["icount"] = False
    assert "Guest instructions" not in report.tables(data)


def test_icount_boots_single_threaded_with_the_instruction_clock():
    m = qemu.Machine(kernel=Path("k"), initrd=Path("i"), cpus=2, icount=True)
    args = m.qemu_args()
    # multi-threaded TCG cannot run with -icount: the machine asks for one thread
    assert args[args.index("-accel") + 1] == "tcg,thread=single"
    assert args[args.index("-icount") + 1] == "shift=0,sleep=off"
    assert "-icount" not in qemu.Machine(kernel=Path("k"), initrd=Path("i")).qemu_args()


def test_icount_takes_a_time_figure_itself_and_other_figures_timed_part():
    # the build's system time is its own figure; its "seconds" is the build's elapsed
    assert report._instructions({"unit": "s", "value": 0.9, "seconds": 50.0}) == 0.9e9
    assert report._instructions({"unit": "pages/s", "value": 5.0, "seconds": 0.5}) == 0.5e9


def test_pgtprot_table_counts_switches_per_operation_fault_and_window():
    # 20 forks of 50 ms in 1 s: 40 windows, 80 PKRS switches, 400 faults
    fork = ["XH-STEP-BEGIN vmstat:start",
            'RESULT {"label": "start", "counters": {"pgtprot_pkrs_switch": 0, '
            '"pgtprot_windows": 0, "pgfault": 0}}',
            "XH-STEP-END vmstat:start 0",
            "XH-STEP-BEGIN sh:xbench:mmap:8",
            'RESULT {"workload": "mmap", "value": 50000.0, "unit": "us/fork", '
            '"better": "lower", "seconds": 1, "user_pages": 2048}',
            'RESULT {"workload": "munmap", "value": 1.0, "unit": "ms", "better": "lower", '
            '"seconds": 1, "user_pages": 0}',
            "XH-STEP-END sh:xbench:mmap:8 0",
            "XH-STEP-BEGIN vmstat:0",
            'RESULT {"label": "0", "counters": {"pgtprot_pkrs_switch": 80, '
            '"pgtprot_windows": 40, "pgfault": 400}}',
            "XH-STEP-END vmstat:0 0",
            "XH-DONE"]
    data = bench.BenchData(meta={"modes": ["pgt-batched"], "cpus": [1]})
    bench.collect(_run(fork), REQ, "pgt-batched", 1, 0, data)
    text = report.tables(data)
    assert "| windows per op | PKRS switches per op | PKRS switches per 1000 faults |" in text
    assert "| mmap | pgt-batched | 2 | 4 | 200.0 | 2 |" in text


def test_bench_on_bochs_refuses_what_it_cannot_run(monkeypatch):
    from harness import errors
    import pytest

    def check(**kw):
        base = dict(machine="bochs-pti", icount=False, modes=["off", "strict"], cpus=[2],
                    quick=False, workloads=["page_fault", "lseek"])
        bench.check_machine(**{**base, **kw})

    check()
    with pytest.raises(errors.HarnessError, match="--icount is QEMU's"):
        check(icount=True)
    with pytest.raises(errors.HarnessError, match="has 2 CPUs, not 4"):
        check(cpus=[4])
    with pytest.raises(errors.HarnessError, match="build_sys.* need one|disk_read"):
        check(workloads=["build_sys", "disk_read"])
    with pytest.raises(errors.HarnessError, match="vanilla kernel is benchmarked on QEMU"):
        check(modes=["vanilla", "off"])
    # QEMU kinds run everything
    check(machine="qemu", workloads=["build_sys"], cpus=[4])


def test_bench_command_line_and_estimate():
    assert (bench.command_line(["off", "sync"], [2], 2, True)
            == "./xpfo bench --modes off sync --cpus 2 --rounds 2 --quick")
    assert (bench.command_line(["off"], [1], 3, False, ["fork"], "k", True, "bochs-tgl")
            == "./xpfo bench --modes off --cpus 1 --rounds 3 --workloads fork --kernel k "
            "--icount --machine bochs-tgl")
    # before the first boot: boots x a boot's time, quick or full
    assert bench.estimate(6, [2], 2, quick=True) == 12 * bench.BOOT_ESTIMATE_S[True]
    assert bench.estimate(5, [1, 2], 3, quick=False) == 30 * bench.BOOT_ESTIMATE_S[False]
    assert bench.default_cpus_on("bochs-tgl") == [1]
    assert bench.default_cpus_on("qemu") == bench.default_cpus()


def test_tlb_table_per_thousand_calls_or_pages():
    lseek = {"mode": "strict", "cpus": 1, "round": 0, "workload": "lseek", "value": 100000.0,
             "unit": "calls/s", "better": "higher", "seconds": 2.0, "user_pages": 0,
             "counters": {"xpfo_tlb_one": 0, "xpfo_tlb_global": 4,
                          "nr_tlb_local_flush_global": 10, "xpfo_user_pages": 5}}
    pf = {"mode": "strict", "cpus": 1, "round": 0, "workload": "page_fault", "value": 1.0,
          "unit": "pages/s", "better": "higher", "seconds": 1.0, "user_pages": 2000,
          "counters": {"xpfo_tlb_one": 2000, "xpfo_tlb_nonglobal": 1}}
    data = bench.BenchData(samples=[lseek, pf], meta={"modes": ["strict"], "cpus": [1]})
    text = report.tables(data)
    # 4 global flushes in 200,000 calls; 2000 INVLPGs for 2000 pages
    assert "| lseek | strict | calls | 0.02 | 0 | 0 | 0 | 0 | 0.05 | 0 |" in text
    assert "| page_fault | strict | user pages | 0 | 0.5 | 1,000 | 0 | 0 | 0 | 0 |" in text
