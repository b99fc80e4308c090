"""Upstream's mm selftests as a peer suite: parsing, table and the diff from off.

The unit tests are pure, on console snippets in the shape the guest step
prints. The integration test boots the kernel (marked 'integration'), and
with its two boots of 4-5 minutes runs only with --full (marked 'full').
"""

import dataclasses
import os
from pathlib import Path

import pytest

from harness import selftests as st
from conftest import DATA

PROGS = [st.Program("hugepage-mmap", ("hugepage-mmap",)),
         st.Program("cow", ("cow",), timeout=600),
         st.Program("memfd_secret", ("memfd_secret",)),
         st.Program("uffd-stress:anon", ("uffd-stress", "anon", "20", "16"), timeout=30),
         st.Program("mseal_test", ("mseal_test",))]

OFF = """\
# XH-STEP-BEGIN selftests:0
SELFTEST-BEGIN hugepage-mmap
Returned address is 0x7f0a3c000000
SELFTEST-END hugepage-mmap 0 1
SELFTEST-BEGIN cow
TAP version 13
1..3
# [RUN] Basic COW after fork() ... with base page
ok 1 No leak from parent into child
ok 2 No leak from child into parent
ok 3 # SKIP MADV_HUGEPAGE failed
# Totals: pass:2 fail:0 xfail:0 xpass:0 skip:1 error:0
SELFTEST-END cow 0 40
SELFTEST-BEGIN memfd_secret
TAP version 13
1..4
ok 1 mlock limit is respected
ok 2 file IO is blocked as expected
ok 3 process_vm_read is blocked as expected
ok 4 ptrace is blocked as expected
# Totals: pass:4 fail:0 xfail:0 xpass:0 skip:0 error:0
SELFTEST-END memfd_secret 0 0
SELFTEST-BEGIN uffd-stress:anon
nr_pages: 5120, nr_pages_per_cpu: 5120
bounces: 15, mode: rnd racing read, ...
SELFTEST-END uffd-stress:anon 0 12
SELFTEST-BEGIN mseal_test
TAP version 13
1..2
ok 1 test_seal_addseal
not ok 2 test_seal_mremap_move
# Totals: pass:1 fail:1 xfail:0 xpass:0 skip:0 error:0
SELFTEST-END mseal_test 1 0
XH-RESULT selftests:0 {"selftest": "mseal_test", "exit": 1, "secs": 0}
ok 2 selftests:0
# XH-DONE
"""

# memfd_secret oopses: the program dies mid-plan, the kernel reports.
SYNC = OFF.replace("""ok 2 file IO is blocked as expected
ok 3 process_vm_read is blocked as expected
ok 4 ptrace is blocked as expected
# Totals: pass:4 fail:0 xfail:0 xpass:0 skip:0 error:0
SELFTEST-END memfd_secret 0 0""", """\
[   41.204218] BUG: unable to handle page fault for address: ffff888004b6d000
[   41.205011] #PF: supervisor read access in kernel mode
[   41.205301] Oops: Oops: 0000 [#1] PREEMPT SMP NOPTI
[   41.206102] RIP: 0010:memcpy_orig+0x31/0x140
[   41.209810] ---[ end trace 0000000000000000 ]---
SELFTEST-END memfd_secret 137 1""").replace(
    "SELFTEST-END uffd-stress:anon 0 12", "SELFTEST-END uffd-stress:anon 137 30")


def _run(text: str, mode: str) -> dict:
    res = st.parse(text.splitlines(), PROGS)
    return {"mode": mode, "outcomes": ["powered off"], "logs": [],
            "programs": {k: dataclasses.asdict(v) for k, v in res.items()}}


def test_totals_line_gives_the_counts():
    r = st.parse(OFF.splitlines(), PROGS)
    assert (r["cow"].passed, r["cow"].failed, r["cow"].skipped) == (2, 0, 1)
    assert r["cow"].totals and r["cow"].status == "pass"
    assert r["mseal_test"].status == "fail" and r["mseal_test"].counts() == (1, 1, 0)


def test_program_without_ktap_is_one_case_by_exit_status():
    r = st.parse(OFF.splitlines(), PROGS)
    assert r["hugepage-mmap"].counts() == (1, 0, 0)
    skip = st.parse(["SELFTEST-BEGIN hugepage-mmap",
                     'SELFTEST-END hugepage-mmap 4 0'], PROGS)
    assert skip["hugepage-mmap"].status == "skip"
    assert skip["hugepage-mmap"].counts() == (0, 0, 1)


def test_oops_mid_plan_is_a_kernel_report_and_the_missing_cases_errors():
    r = st.parse(SYNC.splitlines(), PROGS)["memfd_secret"]
    assert r.status == "fail"
    assert r.counts() == (1, 3, 0)   # one passed, three never reported
    assert [i.split(":")[0] for i in r.incidents] == ["bug"]
    assert "unable to handle page fault" in r.incidents[0]


def test_killed_at_its_deadline_is_a_timeout():
    r = st.parse(SYNC.splitlines(), PROGS)["uffd-stress:anon"]
    assert r.status == "timeout" and r.errors == 1


def test_guest_dying_mid_program_is_a_crash_and_later_programs_not_run():
    text = (OFF[:OFF.index("ok 2 No leak")]
            + "[   50.1] Kernel panic - not syncing: Fatal exception\n")
    r = st.parse(text.splitlines(), PROGS)
    assert r["cow"].status == "crashed" and not r["cow"].finished
    assert [i.split(":")[0] for i in r["cow"].incidents] == ["panic"]
    assert r["memfd_secret"].status == "not-run"


def test_step_end_without_result_closes_the_program():
    for end in ("XH-STEP-END selftests:0 137", "not ok 2 selftests:0 # exit 137",
                "# XH-DONE"):
        r = st.parse(["SELFTEST-BEGIN cow", "ok 1 x", end], PROGS)
        assert r["cow"].status == "crashed" and r["cow"].counts() == (1, 1, 0), end


def test_the_same_outcome_as_off_is_no_difference():
    runs = {"off": _run(OFF, "off"), "sync": _run(OFF, "sync")}
    assert st.differences(runs) == []
    assert "≠" not in st.table(runs)


def test_differences_from_off_are_marked_and_reports_always_count():
    runs = {"off": _run(OFF, "off"), "sync": _run(SYNC, "sync")}
    diffs = st.differences(runs)
    assert any(d.startswith("xpfo=sync memfd_secret: kernel report bug:") for d in diffs)
    assert "xpfo=sync memfd_secret: 1/3/0 BUG (off: 4/0/0)" in diffs
    assert "xpfo=sync uffd-stress:anon: 0/1/0 TIMEOUT (off: 1/0/0)" in diffs
    assert not any("mseal_test" in d for d in diffs)   # fails in both: not a difference
    text = st.table(runs)
    assert "| memfd_secret | 4/0/0 | **1/3/0 BUG ≠** |" in text
    assert "| mseal_test | 1/1/0 | 1/1/0 |" in text
    assert "| **kernel reports** | 0 | 1 |" in text


def test_a_kernel_report_in_off_itself_is_a_difference():
    runs = {"off": _run(SYNC, "off")}
    assert any("kernel report" in d for d in st.differences(runs))
    assert "**1/3/0 BUG**" in st.table(runs)


def test_totals_and_skip_share():
    t = st.totals(_run(OFF, "off"))
    assert t == {"pass": 9, "fail": 1, "skip": 1, "cases": 11, "programs": 5, "reports": 0}
    assert "| **skipped** | 9.1% |" in st.table({"off": _run(OFF, "off")})


def test_run_list_for_the_guest():
    text = st.run_list(PROGS[2:4])
    assert text == ("memfd_secret 300 128 memfd_secret\n"
                    "uffd-stress:anon 30 128 uffd-stress anon 20 16\n")
    ids = [p.id for p in st.PROGRAMS]
    assert len(ids) == len(set(ids))
    assert not {p.binary for p in st.PROGRAMS} & set(st.NOT_RUN)


def test_build_failures_name_the_first_error():
    log = ("  CC       khugepaged\n"
           "khugepaged.c:1195:24: error: 'KSFT_SKIP' undeclared (first use in this function)\n"
           "/usr/bin/ld: /tmp/cc.o: in function `main':\n")
    got = st.build_failures(log, ["khugepaged", "protection_keys_32"])
    assert got["khugepaged"].startswith("'KSFT_SKIP' undeclared")
    assert got["protection_keys_32"].startswith("not built")


def test_tree_digest_follows_content(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.c").write_text("int x;\n")
    d1 = st._tree_digest(tmp_path, ["a"])
    (tmp_path / "a" / "x.c").write_text("int y;\n")
    assert st._tree_digest(tmp_path, ["a"]) != d1


def test_saved_guest_log_parses():
    """Lines captured from a guest (xpfo=off, ca40eae): trimmed, not edited."""
    lines = (DATA / "selftests_off.log").read_text().splitlines()
    res = st.parse(lines, st.PROGRAMS)
    assert res["hugepage-mmap"].status == "pass" and res["hugepage-mmap"].totals
    # Bail out! before any case: failed, though Totals says nothing failed
    assert res["map_populate"].status == "fail" and res["map_populate"].counts() == (0, 1, 0)
    # cut at its deadline while the poison case floods the console
    u = res["uffd-unit-tests"]
    assert u.status == "timeout" and u.counts() == (11, 1, 0) and not u.incidents
    # its last line had no newline
    assert res["protection_keys_64"].exit == 163 and res["protection_keys_64"].status == "fail"
    assert res["mkdirty"].counts() == (4, 0, 2)
    assert res["cow"].status == "not-run"


@pytest.mark.integration
@pytest.mark.full           # 9m24s of the clean-clone run of 2026-11-27: --full only
@pytest.mark.boots("selftests", modes=("off", "strict"), cpus=1)
@pytest.mark.skipif(os.environ.get("XPFO_SKIP_INTEGRATION") == "1",
                    reason="XPFO_SKIP_INTEGRATION=1")
def test_selftests_off_and_strict(tmp_path):
    from harness import build
    kernel = os.environ.get("XPFO_SELFTESTS_KERNEL")
    if kernel is None:
        build.ensure_kernel()
    data = st.run_suite(["off", "strict"], 1, Path(kernel).resolve() if kernel else None,
                        meta={"command": "pytest"})
    off = data["modes"]["off"]
    assert off["outcomes"] == ["powered off"], off["logs"]
    assert data["totals"]["off"]["reports"] == 0, [
        d for d in data["differences"] if d.startswith("xpfo=off")]
    t = data["totals"]["off"]
    assert t["programs"] >= 40 and t["skip"] * 4 < t["cases"], t
    assert data["modes"]["strict"]["programs"]


def test_uffd_unit_tests_cases_and_summary():
    lines = ["SELFTEST-BEGIN uffd-unit-tests",
             "Testing UFFDIO_API (with syscall)... done",
             "Testing zeropage on anon... done",
             "Testing poison on anon... skipped [reason: feature missing]",
             "Testing wp-fork on shmem... failed [reason: wrong value]"]
    cut = st.parse(lines + ["SELFTEST-END uffd-unit-tests 137 300"],
                   [st.Program("uffd-unit-tests", ("uffd-unit-tests",), timeout=300)])
    r = cut["uffd-unit-tests"]
    assert r.status == "timeout" and r.counts() == (2, 2, 1)
    whole = st.parse(lines + ["Userfaults unit tests: pass=2, skip=1, fail=1 (total=4)",
                              "SELFTEST-END uffd-unit-tests 1 20"], PROGS)
    assert whole["uffd-unit-tests"].counts() == (2, 1, 1)
    assert whole["uffd-unit-tests"].status == "fail"


def test_both_cut_at_their_deadline_is_no_difference():
    a = st.ProgramResult("x", status="timeout", passed=61, errors=1)
    b = st.ProgramResult("x", status="timeout", passed=57, errors=1)
    assert st.same(a, b)
    assert not st.same(a, st.ProgramResult("x", status="timeout", passed=50, failed=1, errors=1))
    assert not st.same(a, st.ProgramResult("x", status="pass", passed=61))


def test_from_logs_merges_boots_per_mode(tmp_path):
    crash = OFF[:OFF.index("ok 2 No leak")] + "[ 50.1] Kernel panic - not syncing: x\n"
    rest = "# XH-STEP-BEGIN selftests:2\n" + OFF[OFF.index("SELFTEST-BEGIN memfd_secret"):]
    (tmp_path / "1-selftests-off.log").write_text(crash)
    (tmp_path / "2-selftests-off-1.log").write_text(rest)
    runs = st.from_logs([tmp_path / "1-selftests-off.log", tmp_path / "2-selftests-off-1.log"])
    off = runs["off"]
    assert off["outcomes"] == ["crashed", "powered off"]
    assert off["programs"]["cow"]["status"] == "crashed"
    assert off["programs"]["memfd_secret"]["status"] == "pass"
    assert "gup_test:u" not in off["programs"]   # in no log: not built or not listed


def test_end_marker_after_output_without_newline():
    r = st.parse(["SELFTEST-BEGIN cow", "errno at assert: 2SELFTEST-END cow 163 3"], PROGS)
    assert r["cow"].finished and r["cow"].exit == 163 and r["cow"].status == "fail"


def test_select_keeps_the_named_programs_and_refuses_an_unknown_one():
    progs = st.runnable(["cow", "split_huge_page_test", "mremap_test"])
    assert [p.id for p in st.select(progs, ["split_huge_page_test"])] == ["split_huge_page_test"]
    assert st.select(progs, []) == list(progs)
    with pytest.raises(st.HarnessError) as e:
        st.select(progs, ["nope"])
    assert "unknown or unbuilt selftest program 'nope'" in str(e.value)
