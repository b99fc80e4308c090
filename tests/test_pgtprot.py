"""pgtprot in the harness: mode names, both sides of the stray-store tests,
the pgtprot KUnit suite's rules."""

import json
from pathlib import Path
from typing import List

import pytest

from harness import attacks, console, judge, modes, qemu
from harness.errors import HarnessError

PTE = "lkdtm:PGTPROT_WRITE_PTE"
PMD = "lkdtm:PGTPROT_WRITE_PMD"
OOPS = ["BUG: unable to handle page fault for address: ffff888003a1c008",
        "pgtprot: write to a page-table page (pfn 0x3a1c) denied by protection key 1, "
        "pgtprot=batched",
        "#PF: supervisor write access in kernel mode",
        "---[ end trace 0000000000000000 ]---"]


def test_mode_names():
    assert modes.split("strict") == ("strict", "off")
    assert modes.split("pgt-eager") == ("off", "eager")
    assert modes.split("strict+pgt-batched") == ("strict", "batched")
    assert modes.params("sync") == ["xpfo=sync"]
    assert modes.params("strict+pgt-batched") == ["xpfo=strict", "pgtprot=batched"]
    assert modes.label("pgt-batched") == "xpfo=off pgtprot=batched"
    assert modes.params("pgt-eager") == ["xpfo=off", "pgtprot=eager"]
    assert modes.label("vanilla") == "vanilla"
    assert modes.params("strict+nonglobal") == ["xpfo=strict", "xpfo_dmap=nonglobal"]
    assert modes.params("off+nonglobal") == ["xpfo=off", "xpfo_dmap=nonglobal"]
    assert modes.split("strict+nonglobal") == ("strict", "off")
    assert modes.dmap("strict+nonglobal") == "nonglobal" and modes.dmap("strict") == "global"
    assert modes.label("strict+nonglobal") == "xpfo=strict xpfo_dmap=nonglobal"
    for bad in ("pgt-off", "pgt-bogus", "pgt-batched-wp", "strict+sync", "nope",
                "strict+pgt-eager+pgt-batched", "off+strict", "strict+nonglobal+nonglobal",
                "strict+global"):
        with pytest.raises(HarnessError):
            modes.split(bad)


def _step(name: str, body: List[str], ended: bool = True) -> console.Console:
    lines = ["KTAP version 1", "1..1", f"# XH-STEP-BEGIN {name}", *body]
    if ended:
        lines += [f"ok 1 {name}", "# XH-DONE"]
    return console.parse(lines)


def _landed_pte(value: str = attacks.PGTPROT_USER_VALUE) -> List[str]:
    return ["PGTPROT_WRITE_PTE: entry 0x8000000003f0f025 at ffff888003a1c008, writing it "
            "through the direct map",
            f"PGTPROT_WRITE_PTE: user wrote {value} to a read-only page through the forged PTE"]


def test_off_side_needs_the_users_write_to_land():
    v = attacks.judge_pgt(_step(PTE, _landed_pte()), PTE, "PGTPROT_WRITE_PTE", "strict")
    assert v.passed and "attack works" in v.detail, v.detail
    v = attacks.judge_pgt(_step(PTE, _landed_pte("0x0")), PTE, "PGTPROT_WRITE_PTE", "off")
    assert not v.passed and "test broken" in v.detail
    v = attacks.judge_pgt(_step(PTE, _landed_pte()[:1]), PTE, "PGTPROT_WRITE_PTE", "off")
    assert not v.passed and "did not report" in v.detail
    v = attacks.judge_pgt(_step(PTE, OOPS), PTE, "PGTPROT_WRITE_PTE", "off")
    assert not v.passed and "unexpected" in v.detail
    pmd = ["PGTPROT_WRITE_PMD: wrote the entry back through the direct map"]
    assert attacks.judge_pgt(_step(PMD, pmd), PMD, "PGTPROT_WRITE_PMD", "off").passed


def test_on_side_needs_the_pgtprot_oops_and_no_store():
    v = attacks.judge_pgt(_step(PTE, _landed_pte()[:1] + OOPS), PTE, "PGTPROT_WRITE_PTE",
                          "pgt-batched")
    assert v.passed and "stopped" in v.detail, v.detail
    v = attacks.judge_pgt(_step(PTE, _landed_pte()), PTE, "PGTPROT_WRITE_PTE", "pgt-eager")
    assert not v.passed and "NOT STOPPED" in v.detail
    other = [x.replace("pgtprot: write", "something") for x in OOPS]
    v = attacks.judge_pgt(_step(PTE, other), PTE, "PGTPROT_WRITE_PTE", "strict+pgt-batched")
    assert not v.passed and "expected a pgtprot oops" in v.detail
    v = attacks.judge_pgt(_step(PTE, OOPS, ended=False), PTE, "PGTPROT_WRITE_PTE", "pgt-eager")
    assert not v.passed and "did not go on" in v.detail
    broken = ["FAIL: PGTPROT_WRITE_PTE: the user could write the page before the attack"]
    v = attacks.judge_pgt(_step(PTE, broken), PTE, "PGTPROT_WRITE_PTE", "pgt-eager")
    assert not v.passed and "test broken" in v.detail


def test_pgtprot_oops_is_allowed_only_in_the_attack_steps():
    con = _step(PTE, OOPS)
    assert judge.incidents(con, [PTE]).passed
    assert not judge.incidents(con, []).passed


def _ktap(*cases: str) -> List[str]:
    return (["KTAP version 1", "1..1", "    KTAP version 1", "    # Subtest: pgtprot",
             f"    1..{len(cases)}"] + [f"    {c}" for c in cases] + ["ok 1 pgtprot"])


def test_pgtprot_kunit_rules():
    batched_only = "pgtprot_test_section_window"
    con = console.parse(_ktap("ok 1 pgtprot_test_table_keyed",
                              f"ok 2 {batched_only} # SKIP needs pgtprot=batched"))
    suite = judge.PGT_KUNIT_SUITE
    assert judge.kunit(con, "pgt-eager", suite).passed
    # the batched-only case must run with pgtprot=batched, XPFO or not
    assert not judge.kunit(con, "pgt-batched", suite).passed
    assert not judge.kunit(con, "strict+pgt-batched", suite).passed
    # with pgtprot off every case skips itself, whatever XPFO does
    off = console.parse(_ktap("ok 1 a # SKIP needs pgtprot", "ok 2 b # SKIP needs pgtprot"))
    assert judge.kunit(off, "strict", suite).passed
    v = judge.kunit(con, "strict", suite)
    assert not v.passed and "must skip itself" in v.reasons[0]


def test_attack_run_requires_the_pgtprot_suite_only_where_it_is_on():
    lines = ["KTAP version 1", "1..0", "# XH-DONE"]
    run = qemu.Run(qemu.Machine(kernel=Path("k"), initrd=Path("i")), qemu.Outcome.POWERED_OFF,
                   1.0, console.parse(lines), Path("x.log"), 0, "")
    on = judge.attack_run(run, "pgt-batched", cpus=1)
    assert any("KUnit pgtprot suite, pgtprot=batched: did not run" in r
               for r in on.verdict.reasons)
    off = judge.attack_run(run, "off", cpus=1)
    assert not any("pgtprot suite" in r for r in off.verdict.reasons)


def _refused(body: List[str]) -> console.Console:
    return console.parse(["pgtprot: refused: this CPU has no supervisor protection keys (PKS); "
                          "pgtprot=batched not enabled, page tables stay writable",
                          "KTAP version 1", "1..1", f"# XH-STEP-BEGIN {PTE}", *body,
                          f"ok 1 {PTE}", "# XH-DONE"])


def test_a_machine_without_pks_must_refuse_pgtprot_and_say_so():
    # no PKS: the kernel refuses, the store lands as with pgtprot off
    v = attacks.judge_pgt(_refused(_landed_pte()), PTE, "PGTPROT_WRITE_PTE", "pgt-batched",
                          pks=False)
    assert v.passed and v.detail.startswith(attacks.REFUSED) and "attack works" in v.detail
    # a refusal where the machine has PKS is a failure
    v = attacks.judge_pgt(_refused(_landed_pte()), PTE, "PGTPROT_WRITE_PTE", "pgt-batched")
    assert not v.passed and "refused on a machine with PKS" in v.detail
    # no PKS and no refusal line: not judged as a pass either
    v = attacks.judge_pgt(_step(PTE, _landed_pte()), PTE, "PGTPROT_WRITE_PTE", "pgt-eager",
                          pks=False)
    assert not v.passed and "not refused" in v.detail
    # with pgtprot off the machine makes no difference
    assert attacks.judge_pgt(_step(PTE, _landed_pte()), PTE, "PGTPROT_WRITE_PTE", "strict",
                             pks=False).passed


IMG = "lkdtm:PGTPROT_WRITE_IMAGE"


def test_a_store_through_the_kernel_image_alias_is_judged_on_both_sides():
    landed = ["PGTPROT_WRITE_IMAGE: stored 0x5a5a5a5a5a5a5a5a in a kernel-image page table "
              "through the kernel image"]
    v = attacks.judge_pgt(_step(IMG, landed), IMG, "PGTPROT_WRITE_IMAGE", "off")
    assert v.passed and "the store landed" in v.detail
    v = attacks.judge_pgt(_step(IMG, landed), IMG, "PGTPROT_WRITE_IMAGE", "strict+pgt-batched")
    assert not v.passed and v.detail.startswith("NOT STOPPED")
    assert attacks.judge_pgt(_step(IMG, OOPS), IMG, "PGTPROT_WRITE_IMAGE", "pgt-eager").passed
    v = attacks.judge_pgt(_step(IMG, ["FAIL: PGTPROT_WRITE_IMAGE: no empty entry in the table"]),
                          IMG, "PGTPROT_WRITE_IMAGE", "off")
    assert not v.passed and "test broken" in v.detail


def _audit(label: str, counts: dict, refused: bool = False) -> console.Console:
    step = attacks.pgt_audit_step(label)
    result = json.dumps({"label": label, "pgtaudit": counts})
    head = (["pgtprot: refused: this CPU has no supervisor protection keys (PKS); "
             "pgtprot=batched not enabled, page tables stay writable"] if refused else [])
    return console.parse([*head, "KTAP version 1", "1..1", f"# XH-STEP-BEGIN {step}",
                          f"XH-RESULT {step} {result}", f"ok 1 {step}", "# XH-DONE"])


def _counts(tables: int, writable: int, **alias: int) -> dict:
    out = {"enabled": 1, "roots": 6, "user_mms": 2, "tables": tables, "tables_in_image": 23,
           "writable": writable}
    out.update({f"writable_{k}": alias.get(k, 0) for k in attacks.PGT_AUDIT_ALIASES})
    return out


def test_the_alias_audit_must_find_every_table_writable_off_and_none_on():
    off = _audit("boot", _counts(3100, 3100, direct_map=3100, image=23))
    v = attacks.judge_pgt_audit(off, "boot", "strict")
    assert v.passed and "attack works: 3100 of 3100" in v.detail and "23 image" in v.detail
    # with pgtprot on, the image's tables alone fail it (the series before the fix)
    image_only = _audit("boot", _counts(3100, 23, image=23))
    v = attacks.judge_pgt_audit(image_only, "boot", "strict+pgt-batched")
    assert not v.passed and v.detail.startswith("NOT STOPPED: 23 of 3100")
    assert "23 image" in v.detail
    assert v.test == "PGTPROT_AUDIT[boot]"
    v = attacks.judge_pgt_audit(_audit("boot", _counts(3100, 0)), "boot", "pgt-eager")
    assert v.passed and v.detail.startswith("stopped: 0 of 3100")
    # an audit that finds tables it cannot call writable with pgtprot off is broken
    v = attacks.judge_pgt_audit(_audit("boot", _counts(3100, 3000)), "boot", "off")
    assert not v.passed and "audit broken" in v.detail
    # an audit that found nothing proves nothing
    assert not attacks.judge_pgt_audit(_audit("boot", _counts(0, 0)), "boot", "pgt-eager").passed
    # no audit in the kernel, or no step at all
    assert not attacks.judge_pgt_audit(_audit("boot", None), "boot", "pgt-eager").passed  # type: ignore
    assert not attacks.judge_pgt_audit(_step(PTE, []), "workloads", "pgt-eager").passed


def test_the_alias_audit_on_a_machine_without_pks_is_judged_as_off():
    con = _audit("boot", _counts(3100, 3100, direct_map=3100), refused=True)
    v = attacks.judge_pgt_audit(con, "boot", "pgt-batched", pks=False)
    assert v.passed and v.detail.startswith(attacks.REFUSED)
    assert not attacks.judge_pgt_audit(con, "boot", "pgt-batched").passed


def test_the_attack_boot_audits_first_and_last():
    from harness import attack_runs
    steps = attack_runs.steps(2)
    assert steps[1] == "pgtaudit:boot" and steps[-1] == "pgtaudit:workloads"
    assert "lkdtm:PGTPROT_WRITE_IMAGE" in steps


def test_the_image_tail_must_be_unmapped_with_protection_and_mapped_without():
    def con(n: int, refused: bool = False) -> console.Console:
        c = _counts(3100, 0)
        c["image_tail_writable"] = n
        return _audit("workloads", c, refused=refused)

    assert attacks.judge_image_tail(con(0), "strict").passed
    assert attacks.judge_image_tail(con(0), "pgt-batched").passed
    v = attacks.judge_image_tail(con(400), "pgt-eager")
    assert not v.passed and v.detail.startswith("NOT STOPPED: 400 pages")
    v = attacks.judge_image_tail(con(400), "off")
    assert v.passed and v.detail.startswith("attack works")
    assert not attacks.judge_image_tail(con(0), "off").passed
    # pgtprot refused on a machine without PKS and XPFO off: as off
    assert attacks.judge_image_tail(con(400, refused=True), "pgt-batched", pks=False).passed
    assert not attacks.judge_image_tail(_step(PTE, []), "strict").passed
