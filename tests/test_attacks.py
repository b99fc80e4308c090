"""Both sides of an attack test: the judge must be able to fail."""

import json
import re

from conftest import DATA
from harness import attacks, console

STEP = "lkdtm:XPFO_READ_USER"


def _con(name: str) -> console.Console:
    return console.parse((DATA / name).read_text().splitlines())


def test_off_side_passes_only_when_the_user_value_is_read_back():
    v = attacks.judge_read(_con("xpfo_off.log"), STEP, "XPFO_READ_USER", "off")
    assert v.passed, v.detail
    text = re.sub(r"read 0x[0-9a-f]+ through", "read 0x0000000000000000 through",
                  (DATA / "xpfo_off.log").read_text())
    v = attacks.judge_read(console.parse(text.splitlines()), STEP, "XPFO_READ_USER", "off")
    assert not v.passed and "test broken" in v.detail


def test_sync_side_passes_only_with_the_xpfo_oops():
    v = attacks.judge_read(_con("xpfo_sync.log"), STEP, "XPFO_READ_USER", "sync")
    assert v.passed, v.detail
    # an oops that is not XPFO's does not count
    text = (DATA / "xpfo_sync.log").read_text().replace("xpfo: kernel access", "something")
    v = attacks.judge_read(console.parse(text.splitlines()), STEP, "XPFO_READ_USER", "sync")
    assert not v.passed and "expected an XPFO oops" in v.detail


def test_protected_mode_fails_when_the_read_succeeds():
    v = attacks.judge_read(_con("xpfo_off.log"), STEP, "XPFO_READ_USER", "sync")
    assert not v.passed and "NOT STOPPED" in v.detail


def test_open_mode_fails_on_any_oops():
    v = attacks.judge_read(_con("xpfo_sync.log"), STEP, "XPFO_READ_USER", "off")
    assert not v.passed and "unexpected" in v.detail


def test_guest_that_did_not_go_on_fails():
    lines = (DATA / "xpfo_sync.log").read_text().splitlines()
    cut = [x for x in lines if not x.startswith(f"ok 2 {STEP}")]
    v = attacks.judge_read(console.parse(cut), STEP, "XPFO_READ_USER", "sync")
    assert not v.passed and "did not go on" in v.detail
    v = attacks.judge_read(console.parse([]), STEP, "XPFO_READ_USER", "sync")
    assert not v.passed


def _ret2dir(outcomes, oopses):
    lines = ["XH-STEP-BEGIN sh:ret2dir"]
    for v, (outcome, value) in zip(attacks.RET2DIR_VARIANTS, outcomes):
        lines.append('RESULT {"variant": "%s", "outcome": "%s", "wrote": "0x1", "read": "%s"}'
                     % (v, outcome, value))
    for _ in range(oopses):
        lines += ["BUG: unable to handle page fault for address: ffff888000001000",
                  "xpfo: kernel access to user-owned frame through the direct map at x",
                  "---[ end trace 0000000000000000 ]---"]
    return console.parse(lines + ["XH-STEP-END sh:ret2dir 0"])


def test_ret2dir_demo_judged_per_variant():
    n = len(attacks.RET2DIR_VARIANTS)
    ok_off = attacks.judge_ret2dir(_ret2dir([("read", "0x1")] * n, 0), "off")
    assert len(ok_off) == n and all(v.passed for v in ok_off)
    bad_off = attacks.judge_ret2dir(
        _ret2dir([("read", "0x2")] + [("read", "0x1")] * (n - 1), 0), "off")
    assert [v.passed for v in bad_off] == [False] + [True] * (n - 1)
    ok_sync = attacks.judge_ret2dir(_ret2dir([("blocked", "")] * n, n), "sync")
    assert all(v.passed for v in ok_sync)
    # a blocked read without the XPFO oops behind it is not a pass
    short = attacks.judge_ret2dir(_ret2dir([("blocked", "")] * n, n - 1), "sync")
    assert not all(v.passed for v in short)
    # a variant that never reported (the page did not move) fails its row
    missing = attacks.judge_ret2dir(_ret2dir([("blocked", "")] * (n - 1), n - 1), "sync")
    assert [v.test for v in missing if not v.passed] == [f"ret2dir[{attacks.RET2DIR_VARIANTS[-1]}]"]


def test_by_design_cell_is_reported_not_hidden():
    text = (DATA / "xpfo_off.log").read_text().replace("XPFO_READ_USER", "XPFO_SMP")
    con = console.parse(text.splitlines())
    v = attacks.judge_read(con, "lkdtm:XPFO_SMP", "XPFO_SMP", "deferred")
    assert v.passed and v.detail.startswith("XFAIL (expected by design")
    # the same read in sync mode is a failure: sync must stop it
    v = attacks.judge_read(con, "lkdtm:XPFO_SMP", "XPFO_SMP", "sync")
    assert not v.passed and "NOT STOPPED" in v.detail


def test_not_covered_cell_is_a_gap_in_every_protecting_mode(monkeypatch):
    monkeypatch.setitem(attacks.NOT_COVERED, "XPFO_READ_BDEV", "the block-device page cache")
    text = (DATA / "xpfo_off.log").read_text().replace("XPFO_READ_USER", "XPFO_READ_BDEV")
    con = console.parse(text.splitlines())
    for mode in attacks.PROTECTING_MODES:
        v = attacks.judge_read(con, "lkdtm:XPFO_READ_BDEV", "XPFO_READ_BDEV", mode)
        assert v.passed and v.detail.startswith("GAP (not covered yet: the block-device"), v
    # with xpfo=off it is the plain attack, and must read the value back
    v = attacks.judge_read(con, "lkdtm:XPFO_READ_BDEV", "XPFO_READ_BDEV", "off")
    assert v.passed and v.detail.startswith("attack works")
    # another test reading through the alias is still NOT STOPPED
    other = console.parse((DATA / "xpfo_off.log").read_text().splitlines())
    v = attacks.judge_read(other, "lkdtm:XPFO_READ_USER", "XPFO_READ_USER", "strict")
    assert not v.passed and "NOT STOPPED" in v.detail


def test_block_device_page_cache_is_covered_now():
    """XPFO_READ_BDEV is judged like every other read: a read in a protecting mode fails."""
    assert "XPFO_READ_BDEV" not in attacks.NOT_COVERED
    text = (DATA / "xpfo_off.log").read_text().replace("XPFO_READ_USER", "XPFO_READ_BDEV")
    con = console.parse(text.splitlines())
    v = attacks.judge_read(con, "lkdtm:XPFO_READ_BDEV", "XPFO_READ_BDEV", "strict")
    assert not v.passed and "NOT STOPPED" in v.detail


def _coverage(counts: dict, ended: bool = True, disk: bool = True) -> console.Console:
    name = attacks.coverage_step(disk)
    body = {"file": int(disk), "packet": 0, "io_uring": 1}
    body.update(counts)
    lines = ["KTAP version 1", "1..1", f"# XH-STEP-BEGIN {name}",
             f"XH-RESULT {name} {json.dumps({'coverage': body})}"]
    if ended:
        lines += [f"ok 1 {name}", "# XH-DONE"]
    return console.parse(lines)


def _counts(owned_share: float, **missed: int) -> dict:
    mapped = {"anon": 1357, "ksm": 0, "shmem": 688, "file": 64, "other": 3}
    out = {}
    for k, n in mapped.items():
        out[f"umapped_{k}"] = n
        own = 0 if k == "other" else int(n * owned_share) - missed.get(k, 0)
        out[f"umapped_{k}_owned"] = own
    return out


def test_coverage_needs_every_frame_of_the_gfp_kinds_owned_and_none_with_xpfo_off():
    v = attacks.judge_coverage(_coverage(_counts(1.0)), "strict")
    assert v.passed and "anon 1357/1357" in v.detail and "other 0/3" in v.detail, v.detail
    v = attacks.judge_coverage(_coverage(_counts(1.0, anon=2)), "sync")
    assert not v.passed and "NOT COVERED: anon 2" in v.detail, v.detail
    v = attacks.judge_coverage(_coverage(_counts(0.0)), "off")
    assert v.passed and "all 2112 user-mapped frames" in v.detail, v.detail
    # the other side: frames owned with XPFO off, or none owned with it on
    assert not attacks.judge_coverage(_coverage(_counts(1.0)), "off").passed
    assert not attacks.judge_coverage(_coverage(_counts(0.0)), "strict+pgt-batched").passed


def test_coverage_fails_without_its_workload_or_the_audit():
    counts = _counts(1.0)
    counts["umapped_shmem"] = counts["umapped_shmem_owned"] = 0
    v = attacks.judge_coverage(_coverage(counts), "strict")
    assert not v.passed and "shmem" in v.detail
    v = attacks.judge_coverage(_coverage(_counts(1.0), ended=False), "strict")
    assert not v.passed and "did not run to its end" in v.detail
    v = attacks.judge_coverage(_coverage({}), "strict")
    assert not v.passed and "CONFIG_XPFO_DEBUG" in v.detail
    # without a disk there is no file to map, and none is asked for
    counts = _counts(1.0)
    counts["umapped_file"] = counts["umapped_file_owned"] = 0
    assert attacks.judge_coverage(_coverage(counts, disk=False), "strict", disk=False).passed
