"""Integration: build the kernel once, boot it, and judge what the guest says.

Slow (a kernel build on a fresh machine takes about 11 minutes): marked
'integration', deselect with -m "not integration" (XPFO_SKIP_INTEGRATION=1
does the same). The stress boot in the modes beyond STRESS_DEFAULT is
marked 'full' too: only --full (./xpfo check --full) runs it. Each test's
'boots' marker says what it boots (tests/test_check_selection.py). The
verdicts are harness/judge.py's; these tests add only what a verdict
cannot know (the guest's own view of its CPUs and mode, the counters a
mode must move).
"""

import os
import re
import subprocess
import sys

import pytest

from harness import attack_runs as boots
from harness import attacks, bench, build, deps, guest, judge, modes, qemu, source, stress
from harness.paths import LAYOUT

pytestmark = pytest.mark.integration

STRESS_SECONDS = int(os.environ.get("XPFO_STRESS_SECONDS", "60"))
# the stress boot's modes, and those of the default run: batched, whose
# offline path maps kept frames back (what the hotplug step was written to
# catch), and the recommended configuration (strict's IPIs, quiet CPUs and
# frames cleared ahead, pgtprot's batched windows); the other six, about
# 75 s each, with --full (docs/TESTING.md)
STRESS_MODES = modes.XPFO_MODES + modes.PGT_RUN_MODES
STRESS_DEFAULT = ("batched", modes.RECOMMENDED)


@pytest.fixture(scope="session")
def kernel():
    build.ensure_kernel()


@pytest.fixture(scope="session")
def source_tree():
    """build/src (base + series), without building it."""
    deps.ensure(quiet=True)
    return source.prepare(LAYOUT)


@pytest.fixture(scope="session")
def attack_runs(kernel):
    return {mode: boots.check_run(mode) for mode in boots.TEST_MODES}


@pytest.mark.boots("attacks", modes=boots.TEST_MODES, cpus=2)
def test_guest_reports_from_inside(attack_runs):
    for mode, run in attack_runs.items():
        assert run["outcome"] == qemu.Outcome.POWERED_OFF.value, \
            f"{mode}: {run['log']}\n{run['tail']}"
        assert run["info"]["cpus"] == 2
        assert run["info"]["xpfo_mode"] == modes.xpfo(mode)
        assert run["info"]["pgtprot_mode"] == modes.pgt(mode)
        assert run["info"]["kernel"].startswith("6.12")


@pytest.mark.boots("attacks", cpus=2)
@pytest.mark.parametrize("mode", list(boots.TEST_MODES))
def test_attacks_both_sides(attack_runs, mode):
    run = attack_runs[mode]
    attack = [r for r in run["reasons"] if not r.startswith("KUnit")]
    assert not attack, f"{attack} (log {run['log']})"
    names = {v["test"] for v in run["verdicts"]}
    assert {a.name for a in attacks.LKDTM_ATTACKS + attacks.PGTPROT_ATTACKS} <= names
    assert {f"ret2dir[{v}]" for v in attacks.RET2DIR_VARIANTS} <= names


@pytest.mark.boots("attacks", cpus=2)
@pytest.mark.parametrize("mode", list(boots.TEST_MODES))
def test_kunit_suite(attack_runs, mode):
    # judge.kunit: every case reported; with XPFO on all pass but the
    # batched-only case outside batched, with XPFO off all skip; the same for
    # the pgtprot suite on the mode's pgtprot part
    run = attack_runs[mode]
    assert run["kunit"]["pass"] + run["kunit"]["skip"] > 0, run["kunit"]
    assert run["kunit_pgtprot"]["pass"] + run["kunit_pgtprot"]["skip"] > 0, run
    if modes.pgt(mode) != "off":
        assert run["kunit_pgtprot"]["pass"] > 0, run["kunit_pgtprot"]
    assert not [r for r in run["reasons"] if r.startswith("KUnit")], run["reasons"]
    assert run["status"] == judge.Status.SUCCESS.value, run["reasons"]


# What checkpatch --strict may still say, patch by patch, and why (the cover
# letters say it too): kmap()/kmap_atomic() where they are defined, tested or
# needed; reiserfs is marked obsolete; PAGEFLAG() names; the TRACE_EVENT()
# layout; asm/ headers where the linux/ one lacks the stubs or would be
# circular; a KUnit case that must not sleep; cpufeatures.h's own spacing.
CHECKPATCH_ALLOWED = {
    # its Fixes: names an upstream commit; Debian's source has no history
    "1-xpfo/0001": {"UNKNOWN_COMMIT_ID"},
    "1-xpfo/0006": {"DEPRECATED_API"},
    "1-xpfo/0008": {"DEPRECATED_API", "OBSOLETE"},
    "1-xpfo/0009": {"OBSOLETE"},
    # EXPORT_SYMBOL: checkpatch does not take the DEFINE_STATIC_KEY_FALSE()
    # on the line above the export for the symbol's definition
    "1-xpfo/0010": {"DEPRECATED_API", "CAMELCASE", "EXPORT_SYMBOL"},
    "1-xpfo/0017": {"ARCH_INCLUDE_LINUX"},
    # the tracepoint's TRACE_EVENT() layout; count_xpfo_event() drops its
    # item, which exists with CONFIG_XPFO_DEBUG only (as count_vm_tlb_event())
    "1-xpfo/0019": {"OPEN_ENDED_LINE", "PARENTHESIS_ALIGNMENT", "MACRO_ARG_UNUSED"},
    "1-xpfo/0034": {"DEPRECATED_API", "USLEEP_RANGE"},
    "2-pgtprot/0001": {"SPACING"},
    # count_pgtprot_event() drops its item, as count_xpfo_event() does
    "2-pgtprot/0002": {"ARCH_INCLUDE_LINUX", "MACRO_ARG_UNUSED"},
}


def test_series_is_checkpatch_clean_but_for_what_it_names(source_tree):
    from harness import series
    results = series.check(build_each=False)
    assert len(results) >= 4
    assert all(r.errors == 0 for r in results), [m for r in results for m in r.messages]
    unexpected = []
    for r in results:
        allowed = CHECKPATCH_ALLOWED.get(r.patch[:r.patch.index("-", r.patch.index("/"))], set())
        for m in r.messages:
            kind = re.search(r": (?:WARNING|CHECK):([A-Z_]+):", m)
            if not kind or kind.group(1) not in allowed:
                unexpected.append(f"{r.patch}: {m}")
    assert not unexpected, unexpected


def test_checkpatch_spdx_check_is_real(source_tree):
    # checkpatch asks scripts/spdxcheck.py, which passes every tag when it
    # cannot import git (GitPython) or ply: it must be able to here
    check = [sys.executable, str(source_tree / "scripts/spdxcheck.py"), "-"]
    good = subprocess.run(check, input="SPDX-License-Identifier: GPL-2.0-only\n", cwd=source_tree,
                          capture_output=True, text=True)
    bad = subprocess.run(check, input="SPDX-License-Identifier: GPL-9.9-bogus\n", cwd=source_tree,
                         capture_output=True, text=True)
    assert good.returncode == 0 and good.stdout == "", good.stdout + good.stderr
    assert "Invalid License ID: GPL-9.9-bogus" in bad.stdout, bad.stdout + bad.stderr


def test_the_kernels_ktap_parser_sees_a_runner_that_died_as_crashed(source_tree):
    # kunit.py's own parser (tools/testing/kunit in the tree) reads the
    # runner's framing: a runner cut off mid-step is a crash to it, a runner
    # that ran to its end with a failed step a failure
    import importlib

    kunit = source_tree / "tools" / "testing" / "kunit"
    sys.path.insert(0, str(kunit))
    try:
        kunit_parser = importlib.import_module("kunit_parser")
    finally:
        sys.path.remove(str(kunit))
    lines = ["KTAP version 1", "1..3", "# XH-STEP-BEGIN info", "ok 1 info",
             "# XH-STEP-BEGIN lkdtm:PANIC", "[    3.1] Kernel panic - not syncing: dumptest"]
    test = kunit_parser.parse_run_tests(lines)
    assert test.status is kunit_parser.TestStatus.TEST_CRASHED
    full = lines[:4] + ["# XH-STEP-BEGIN b", "not ok 2 b # exit 3", "# XH-STEP-BEGIN c",
                        "ok 3 c", "# XH-DONE"]
    assert kunit_parser.parse_run_tests(full).status is kunit_parser.TestStatus.FAILURE


@pytest.mark.boots("bad-param")
def test_unknown_mode_warns_and_stays_off(kernel):
    req = guest.GuestRequest(steps=["info"], cpus=1, mem_mb=512,
                             params=["xpfo=bogus", "pgtprot=bogus", "xpfo_dmap=bogus"],
                             timeout=300, label="bad-param")
    r = guest.run(req)
    v = judge.boot(r)
    assert v.passed, v.reasons
    assert r.console.steps["info"].results[0]["xpfo_mode"] == "off"
    assert r.console.steps["info"].results[0]["pgtprot_mode"] == "off"
    warned = ("xpfo: unknown mode 'bogus', XPFO stays off; "
              "accepted: off sync deferred batched strict")
    assert any(warned in x for x in r.console.lines)
    assert any("pgtprot: unknown mode 'bogus', pgtprot stays off; accepted: off eager batched" in x
               for x in r.console.lines)
    assert any("xpfo: xpfo_dmap=bogus: unknown, use global or nonglobal; keeping global" in x
               for x in r.console.lines)


@pytest.mark.boots("hung", cpus=2)
def test_hung_guest_is_asked_where_its_cpus_are(kernel, tmp_path):
    # no steps: the guest's shell waits for input that never comes, as a
    # hung guest would; at its deadline the harness asks for the CPUs'
    # backtraces (SysRq l), the blocked tasks (SysRq w) and the monitor's
    # registers of every vCPU, into the log
    m = guest.machine(guest.GuestRequest(steps=[], cpus=2, mem_mb=512, label="hung"))
    log = tmp_path / "hung.log"
    r = qemu.run(m, 30, log)
    assert r.outcome is qemu.Outcome.TIMEOUT
    text = log.read_text(errors="replace")
    assert "starting a shell" in text
    assert "sysrq: Show backtrace of all active CPUs" in text
    assert "NMI backtrace for cpu 1" in text
    assert "sysrq: Show Blocked State" in text
    assert "CPU#1" in text and "RIP=" in text


@pytest.mark.boots("old-mode-name")
def test_the_former_name_of_batched_is_taken(kernel):
    """xpfo=batch, the name of batched before series v6, boots batched."""
    req = guest.GuestRequest(steps=["info"], cpus=1, mem_mb=512, params=["xpfo=batch"],
                             timeout=300, label="old-mode-name")
    r = guest.run(req)
    v = judge.boot(r)
    assert v.passed, v.reasons
    assert r.console.steps["info"].results[0]["xpfo_mode"] == "batched"
    assert any("xpfo: mode batched" in x for x in r.console.lines)


def _kmapsites(mode: str) -> dict:
    req = guest.GuestRequest(steps=["info", "kmapsites:page_fault_thp:16", "kmapsites:file:8"],
                             cpus=2, mem_mb=1024, params=[f"xpfo={mode}"], timeout=300,
                             label=f"kmapsites-{mode}")
    r = guest.run(req)
    v = judge.boot(r)
    assert v.passed, v.reasons
    out: dict = {}
    for name in ("kmapsites:page_fault_thp:16", "kmapsites:file:8"):
        for res in r.console.steps[name].results:
            if "workload" in res:
                out[res["workload"]] = res
            elif "kmapsites" in res:
                out["sites:" + res["kmapsites"]] = res
    return out


@pytest.mark.boots("kmapsites", modes=("strict", "off"), cpus=2)
def test_kmap_sites_one_mapping_per_thp_and_per_page_copied(kernel):
    """xpfo:kmap, in strict mode: a THP is cleared through one mapping of
    order 9 (512 of order 0 before patch 27), write and read map each page
    they copy once; xpfo=off maps nothing."""
    on = _kmapsites("strict")
    thp = on["page_fault_thp"]
    nr_thp = thp["check"]["thp_fault_alloc"]
    assert nr_thp >= 16, thp["check"]
    sites = on["sites:page_fault_thp"]["sites"]
    assert on["sites:page_fault_thp"]["dropped"] == 0
    huge = sum(x["maps"] for x in sites if x["order"] == 9)
    # one per THP unless the CPU was wanted mid-clear (then one more per
    # time it gave way); far below the 512 per THP of a page at a time
    assert nr_thp <= huge <= 32 * nr_thp, sites
    assert thp["counters"]["xpfo_kmap"] < 64 * nr_thp, thp["counters"]
    for w, site in (("write", "copy_page_from_iter_atomic"), ("read", "copy_page_to_iter")):
        pages = on[w]["user_pages"]
        maps = on[w]["counters"]["xpfo_kmap"]
        assert pages <= maps <= 1.05 * pages, (w, pages, maps)
        assert any(x["site"] == site and x["maps"] >= pages
                   for x in on["sites:file"]["sites"]), on["sites:file"]
    off = _kmapsites("off")
    assert off["sites:file"]["sites"] == [] and off["sites:page_fault_thp"]["sites"] == []
    assert off["write"]["counters"]["xpfo_kmap"] == 0


@pytest.mark.boots("stress", cpus=4)
@pytest.mark.parametrize("run_mode", [
    m if m in STRESS_DEFAULT else pytest.param(m, marks=pytest.mark.full) for m in STRESS_MODES])
def test_stress_smp4(kernel, run_mode):
    res = stress.run(run_mode, cpus=4, seconds=STRESS_SECONDS, mem_mb=512)
    mode, pgt = modes.split(run_mode)
    assert res["status"] == judge.Status.SUCCESS.value, res["reasons"]
    # every worker did its work at least once, page-cache churn included
    workers = {w["worker"]: w for w in res["workers"] if "worker" in w}
    assert all(workers[w]["iterations"] >= 1 for w in
               ("forkexec", "cow", "thp", "pressure", "tmpfs", "pagecache")), workers
    c = res["counters"]
    # the thp worker's memory was huge pages (a 512 MiB guest boots with THP
    # off; the stress step turns it on): THP free and clear paths ran
    assert c.get("thp_fault_alloc", 0) > 0, c
    if mode == "off":
        assert c["xpfo_unmap"] == 0 and c["xpfo_flush"] == 0
    else:
        assert c["xpfo_unmap"] > 0 and c["xpfo_flush"] > 0
        # slots are flushed with one INVLPG; without PTI (this machine) no
        # XPFO flush leaves other ASIDs to flush, and the direct map is
        # global, so refills and deferred flushes are global ones
        assert c["xpfo_tlb_one"] > 0 and c["xpfo_tlb_other_asids"] == 0, c
        assert c["xpfo_tlb_nonglobal"] == 0, c
    if mode in ("sync", "strict"):
        # a frame that may be in another TLB is flushed there before it is
        # handed out, and kunmap() flushes every CPU: no deferred request;
        # a CPU in user mode or idle is asked to flush before it is busy
        # again instead of an IPI, and takes at most one flush per request
        assert c["xpfo_flush_ipi_sent"] > 0 and c["xpfo_deferred_request"] == 0
        assert c["xpfo_quiet_request"] > 0, c
        assert 0 < c["xpfo_quiet_flush"] <= c["xpfo_quiet_request"], c
    else:
        assert c.get("xpfo_quiet_request", 0) == 0, c
    if mode == "strict":
        # frames userspace freed in batches, and refills for faults, were
        # cleared ahead, and user faults got them without a clear of their
        # own; batched clears on allocation
        assert c["xpfo_zeroed"] > 0 and c["xpfo_zeroed_used"] > 0, c
    else:
        assert c.get("xpfo_zeroed", 0) == 0, c
    if mode in ("deferred", "batched"):
        assert c["xpfo_deferred_flush"] > 0
    if mode in ("batched", "strict"):
        assert c["xpfo_batch_preflushed"] > 0
        # freed user frames stay unmapped and most reuse needs no unmap
        assert c["xpfo_batch_kept"] > 0
        assert c["xpfo_batch_preflushed"] > c["xpfo_unmap"]
    if mode != "off":
        assert c["xpfo_user_pages"] >= c["xpfo_batch_preflushed"]
        # user allocations in atomic context fail closed but leave a remote
        # window even in sync mode: the stress load must not make any
        assert c.get("xpfo_atomic", 0) == 0, c
        if mode in ("sync", "deferred"):
            # every frame that went back to the direct map was cleared first
            assert c.get("xpfo_clear", 0) >= c["xpfo_remap"], c
        else:
            # batched and strict map back without a clear the kernel frames a
            # list refill unmapped, which never held user data (patch 51;
            # KUnit xpfo_test_never_user shows a user's frame is cleared):
            # some clears, and no more of them than frames mapped back
            assert 0 < c.get("xpfo_clear", 0) <= c["xpfo_remap"], c
    if pgt == "off":
        assert c.get("pgtprot_writes", 0) == 0, c
    else:
        # page tables were written through windows; each window is one
        # PKRS switch to open it and one to close it; batched sections
        # store inside theirs without opening one per store, so windows
        # are fewer than in eager, where each is one store
        assert c["pgtprot_writes"] > 0 and c["pgtprot_protect"] > 0, c
        windows = c["pgtprot_windows"]
        assert windows > 0, c
        assert c["pgtprot_pkrs_switch"] == 2 * windows, c
        if pgt == "eager":
            assert c["pgtprot_writes"] == windows, c
        else:
            assert c["pgtprot_writes"] < windows, c
    # the direct map agrees with every frame's owner after the load and after
    # memory blocks went offline and online again (judged in res["status"])
    assert set(res["audits"]) == {"stress", "hotplug"}, res["audits"]
    assert all(a is not None and a["frames"] > 0 for a in res["audits"].values())
    assert res["hotplug"]["cycled"] >= 1, res["hotplug"]
    if mode in ("batched", "strict"):
        # the offlined blocks held freed user frames that batched mode kept
        assert res["hotplug"]["mapped_back"] > 0, res["hotplug"]
    else:
        assert res["hotplug"]["mapped_back"] == 0, res["hotplug"]
    # kept_counted: free frames kept unmapped, found on the free lists too
    # (the two agree within judge.KEPT_SLACK, judged in res["status"])
    for label, a in res["audits"].items():
        if mode in ("batched", "strict"):
            assert a["kept"] > 0 and a["kept_counted"] > 0, (label, a)
        else:
            assert a["kept"] == 0 and a["kept_counted"] == 0, (label, a)


@pytest.mark.boots("stress", modes=("strict",), cpus=2)
def test_page_poisoning_finds_its_pattern_in_frames_xpfo_kept(kernel):
    # page_poison=1 writes a pattern over every frame freed and checks it
    # when the frame is allocated again. A frame userspace freed is written
    # through kmap while strict keeps it out of the direct map; a kernel
    # allocation that takes it back must find the pattern there, not zeros
    # of a clear of XPFO's ("pagealloc: memory corruption", an incident)
    res = stress.run("strict", cpus=2, seconds=20, mem_mb=512,
                     extra=["page_poison=1", "kunit.enable=1"])
    assert res["status"] == judge.Status.SUCCESS.value, res["reasons"]
    # KUnit's xpfo suite under poisoning: xpfo_test_never_user poisons a
    # frame userspace freed as the free path does, and expects the pattern
    # back rather than zeros, and no claim that it holds zeros
    cases = {c["name"]: c["status"] for c in res["kunit_cases"] if c["suite"] == "xpfo"}
    assert cases.get("xpfo_test_never_user") == "pass", cases
    assert "fail" not in cases.values(), cases
    c = res["counters"]
    # frames userspace freed were kept, and the kernel took kept frames back
    assert c["xpfo_batch_kept"] > 0 and c["xpfo_remap"] > 0, c
    # nothing is cleared ahead of a fault: the check would see the zeros
    assert c.get("xpfo_zeroed", 0) == 0, c
    assert res["hotplug"]["mapped_back"] > 0, res["hotplug"]


@pytest.mark.boots("bench", modes=("off", "sync"), cpus=2)
def test_tiny_benchmark_end_to_end(kernel, tmp_path):
    # single-threaded TCG, as for the other tests (docs/TESTING.md)
    data = bench.run_and_report(["off", "sync"], [2], 1, True, tmp_path / "bench",
                                "tiny benchmark from the test suite", tcg_threads="single")
    v = judge.bench_failures(data.failures)
    assert v.passed, v.reasons
    cells = {(s["workload"], s["mode"]) for s in data.samples}
    for w in ("build_sys", "page_fault", "fork", "mmap", "munmap", "write", "read", "exec",
              "lseek", "pwrite1"):
        assert (w, "off") in cells and (w, "sync") in cells, w
    pf = {s["mode"]: s for s in data.samples if s["workload"] == "page_fault"}
    # sync unmaps (and flushes) every page the workload touched; off unmaps none
    assert pf["sync"]["counters"]["xpfo_unmap"] >= pf["sync"]["user_pages"]
    assert pf["sync"]["counters"]["xpfo_flush_ipi_sent"] > 0
    # and the kernel counted at least those pages as handed to userspace
    assert pf["sync"]["counters"]["xpfo_user_pages"] >= pf["sync"]["user_pages"]
    assert pf["off"]["counters"]["xpfo_unmap"] == 0
    assert pf["off"]["counters"]["xpfo_flush_ipi_sent"] == 0
    assert all(s["value"] > 0 for s in data.samples)
    assert (tmp_path / "bench" / "results.md").exists()
    assert (tmp_path / "bench" / "overhead.png").exists()
