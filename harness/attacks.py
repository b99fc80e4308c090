"""Attack tests and how to judge them from the console, per XPFO mode.

Each lkdtm XPFO test plants a value in a user-owned frame and reads it back
through the frame's direct-map (physmap) alias. Both sides are checked:

* with the protection off, the read must succeed and return exactly the
  value the user wrote (proof that the test reaches the frame), and nothing
  may oops;
* with the protection on, the read must oops with the XPFO message, and the
  guest must go on to its next step.
"""

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from . import modes
from .console import Console, Step

XPFO_OOPS = r"xpfo: kernel access to user-owned frame"
_WROTE = re.compile(r"(\S+): user wrote (0x[0-9a-f]+)")
_READ = re.compile(r"(\S+): read (0x[0-9a-f]+) through the physmap alias")

# Which modes protect (the read must be stopped) and which do not.
PROTECTING_MODES = ("sync", "deferred", "batched", "strict")
OPEN_MODES = ("off",)
# Cells that a mode cannot pass by design: the read is expected to succeed,
# and the result says so instead of hiding it.
_DEFERRED_WHY = ("deferred leaves the alias in other CPUs' TLBs until they switch context, "
                 "enter the kernel (from user mode, or by an interrupt) or leave idle; "
                 "the reader spins in the kernel")
_BATCH_WHY = ("batched hands a frame reused hot from the per-CPU list to userspace with "
              "deferred mode's flush only (measured in the strict-mode work of 2026-11-21: "
              "63-64 of 64 such frames readable); only a refill is flushed everywhere at once")
_BATCH_THP_WHY = ("batched flushes only order-0 refills everywhere at once; a THP reused hot "
                  "from the per-CPU list gets deferred mode's flush (the strict-mode work of "
                  "2026-11-21: 383-990 of 1024 THP frames readable)")
_MTHP_WHY = ("an mTHP order (64K) is never on a per-CPU list: deferred and batched hand it "
             "to userspace with deferred mode's flush")
BY_DESIGN = {
    ("XPFO_SMP", "deferred"): _DEFERRED_WHY,
    ("XPFO_SMP_HOT", "deferred"): _DEFERRED_WHY,
    ("XPFO_SMP_THP", "deferred"): _DEFERRED_WHY,
    ("XPFO_SMP", "batched"): _BATCH_WHY,
    ("XPFO_SMP_HOT", "batched"): _BATCH_WHY,
    ("XPFO_SMP_THP", "batched"): _BATCH_THP_WHY,
    ("XPFO_SMP_MTHP", "deferred"): _MTHP_WHY,
    ("XPFO_SMP_MTHP", "batched"): _MTHP_WHY,
}
# Frames the series does not protect yet, in any mode: the read is expected
# to succeed, and the result says GAP (Documentation/security/xpfo.rst,
# "Not protected"). A read that is stopped there counts as passing too.
# None today: the block-device page cache (XPFO_READ_BDEV) was the last
# one, covered since patch 31.
NOT_COVERED: Dict[str, str] = {}
# A frame userspace freed is safe if XPFO cleared it before its alias came
# back (the read finds no payload) or kept it unmapped (the read oopses).
_GONE = "the payload is gone from the freed frame"


@dataclass(frozen=True)
class Attack:
    name: str
    what: str
    min_cpus: int = 1
    cleared_stops: bool = False     # a read of a cleared frame counts as stopped
    needs_disk: bool = False        # reads from the scratch disk (the disk step first)


LKDTM_ATTACKS = [
    Attack("XPFO_READ_USER", "anonymous page"),
    Attack("XPFO_READ_USER_HUGE", "transparent huge page (tail subpage)"),
    Attack("XPFO_READ_HUGETLB", "hugetlbfs page"),
    Attack("XPFO_READ_PAGECACHE", "page cache of a file written with write()"),
    Attack("XPFO_READ_SHMEM", "shared anonymous (shmem) page"),
    Attack("XPFO_READ_COW", "copy made by a write fault on a private mapping"),
    Attack("XPFO_READ_SYMLINK", "body of a long symlink on tmpfs (page cache)"),
    Attack("XPFO_READ_SYMLINK_RAMFS", "body of a long symlink on ramfs (page_get_link())"),
    Attack("XPFO_READ_BDEV", "ext2 fast-symlink target in the block device's page cache",
           needs_disk=True),
    Attack("XPFO_READ_FREED", "frame the user wrote and freed (physmap spray)", cleared_stops=True),
    Attack("XPFO_SMP", "alias warmed in another CPU's TLB before the page went to user", 2),
    Attack("XPFO_SMP_HOT", "the same, the page reused hot at the first user fault", 2),
    Attack("XPFO_SMP_THP", "the same with a THP reused hot at the first user fault", 2),
    Attack("XPFO_SMP_MTHP", "the same with a 64K mTHP block the buddy allocator hands back", 2),
]


@dataclass(frozen=True)
class Verdict:
    test: str
    mode: str
    passed: bool
    detail: str


def _step(con: Console, name: str) -> Optional[Step]:
    return con.steps.get(name)


def _stopped(incidents: list, pattern: str, what: str, test: str, run_mode: str) -> Verdict:
    """The protected side: an oops that matches @pattern, and nothing else."""
    ours = [i for i in incidents if i.mentions(pattern)]
    other = [i for i in incidents if not i.mentions(pattern)]
    if not ours:
        why = f"{incidents[0].kind}: {incidents[0].first_line}" if incidents else "no oops"
        return Verdict(test, run_mode, False, f"expected {what} oops, got {why}")
    if other:
        return Verdict(test, run_mode, False,
                       f"another {other[0].kind} too: {other[0].first_line}")
    return Verdict(test, run_mode, True, f"stopped: {what.split()[-1]} oops, guest went on")


def judge_read(con: Console, step_name: str, test: str, run_mode: str,
               cleared_stops: bool = False) -> Verdict:
    """Judge one physmap read (lkdtm test or ret2dir demo) in one mode:
    its XPFO part decides (pgtprot does not stop a read)."""
    mode = modes.xpfo(run_mode)
    st = _step(con, step_name)
    if st is None:
        return Verdict(test, run_mode, False, "step never started (guest died earlier?)")
    if not st.ended:
        return Verdict(test, run_mode, False, "step never finished: the guest did not go on")
    incidents = con.incidents_in(step_name)
    wrote = [m.group(2) for m in map(_WROTE.search, st.lines) if m]
    read = [m.group(2) for m in map(_READ.search, st.lines) if m]
    why = BY_DESIGN.get((test, mode))
    label = "XFAIL (expected by design"
    if not why and mode in PROTECTING_MODES and test in NOT_COVERED:
        why, label = NOT_COVERED[test], "GAP (not covered yet"
    if why and incidents and all(i.mentions(XPFO_OOPS) for i in incidents) and not read:
        return Verdict(test, run_mode, True, f"XPASS (stopped this time; not guaranteed by design: "
                                         f"{why})")
    if mode in OPEN_MODES or why:
        if incidents:
            return Verdict(test, run_mode, False,
                           f"unexpected {incidents[0].kind}: {incidents[0].first_line}")
        if not wrote or not read:
            return Verdict(test, run_mode, False, "the test did not report what it wrote and read")
        if read[-1] != wrote[-1]:
            return Verdict(test, run_mode, False,
                           f"read {read[-1]} but the user wrote {wrote[-1]}: test broken")
        if why:
            return Verdict(test, run_mode, True, f"{label}: {why}): read back {read[-1]}")
        return Verdict(test, run_mode, True, f"attack works: read back {read[-1]}")
    if mode in PROTECTING_MODES:
        if not wrote:
            return Verdict(test, run_mode, False, "the test did not get as far as planting a value")
        if read and cleared_stops and read[-1] != wrote[-1] and not incidents \
                and any(_GONE in line for line in st.lines):
            return Verdict(test, run_mode, True, f"stopped: frame cleared before its alias came "
                                             f"back (read {read[-1]})")
        if read:
            return Verdict(test, run_mode, False, f"NOT STOPPED: read {read[-1]} through the alias")
        return _stopped(incidents, XPFO_OOPS, "an XPFO", test, run_mode)
    return Verdict(test, run_mode, False, f"no expectation defined for mode {mode}")


# pgtprot: a stray store to a live page table of the calling process.
# the report names the protection key that stopped the store
PGTPROT_OOPS = r"pgtprot: write to a page-table page \(pfn \S+\) denied by protection key \d+"
_PGT_LANDED = re.compile(r"(\S+): (user wrote (0x[0-9a-f]+) to a read-only page through the "
                         r"forged PTE|wrote the entry back through the direct map"
                         r"|stored 0x[0-9a-f]+ in a kernel-image page table "
                         r"through the kernel image)")
PGTPROT_USER_VALUE = "0x5a5a5a5a5a5a5a5a"
REFUSED = "refused (no PKS on this machine)"
PGTPROT_ATTACKS = [
    Attack("PGTPROT_WRITE_PTE", "set _PAGE_RW in the PTE of a read-only user page"),
    Attack("PGTPROT_WRITE_PMD", "store to the PMD entry of a user mapping"),
    Attack("PGTPROT_WRITE_PGD", "store to the PGD entry of a user mapping"),
    Attack("PGTPROT_WRITE_IMAGE", "store to a page table inside the kernel image through the "
           "image's own mapping"),
]


# a CPU without supervisor protection keys refuses pgtprot at boot
PGTPROT_REFUSED = re.compile(r"pgtprot: refused: (.*)$")


def pgt_refused(con: Console) -> Optional[str]:
    """The reason the kernel gave for refusing pgtprot, if it did."""
    for line in con.lines:
        m = PGTPROT_REFUSED.search(line.rstrip())
        if m:
            return m.group(1)
    return None


def _pgt_refusal(con: Console, test: str, run_mode: str, pks: bool,
                 as_off: Callable[[], Verdict]) -> Optional[Verdict]:
    """Where the mode asks for pgtprot and the kernel refused it, or the
    machine has no PKS: the verdict (`as_off` judges the run as with
    pgtprot off, which a refusal on a machine without PKS must match).
    None where pgtprot is off or was not refused on a machine with PKS."""
    if modes.pgt(run_mode) == "off":
        return None
    refused = pgt_refused(con)
    if refused is None and pks:
        return None
    if pks:
        return Verdict(test, run_mode, False, f"pgtprot refused on a machine with PKS: {refused}")
    if refused is None:
        return Verdict(test, run_mode, False, "pgtprot not refused on a machine without PKS")
    off = as_off()
    return Verdict(test, run_mode, off.passed, f"{REFUSED}: {off.detail}")


def judge_pgt(con: Console, step_name: str, test: str, run_mode: str,
              pks: bool = True) -> Verdict:
    """Judge one stray page-table store: its pgtprot part decides. On a
    machine without PKS (`pks` false) pgtprot must refuse at boot, and the
    store then lands as with pgtprot off: the table says so."""
    pgt = modes.pgt(run_mode)
    refusal = _pgt_refusal(con, test, run_mode, pks,
                           lambda: judge_pgt(con, step_name, test, "off"))
    if refusal is not None:
        return refusal
    st = _step(con, step_name)
    if st is None:
        return Verdict(test, run_mode, False, "step never started (guest died earlier?)")
    if not st.ended:
        return Verdict(test, run_mode, False, "step never finished: the guest did not go on")
    incidents = con.incidents_in(step_name)
    failed = [line for line in st.lines if "FAIL:" in line]
    landed = [m for m in map(_PGT_LANDED.search, st.lines) if m]
    if failed:
        return Verdict(test, run_mode, False, f"test broken: {failed[0].strip()}")
    if pgt == "off":
        if incidents:
            return Verdict(test, run_mode, False,
                           f"unexpected {incidents[0].kind}: {incidents[0].first_line}")
        if not landed:
            return Verdict(test, run_mode, False, "the store did not report landing")
        value = landed[-1].group(3)
        if value is not None and value != PGTPROT_USER_VALUE:
            return Verdict(test, run_mode, False,
                           f"the user wrote {value}, not {PGTPROT_USER_VALUE}: test broken")
        return Verdict(test, run_mode, True, "attack works: " + (
            f"the user wrote {value} to its read-only page" if value else "the store landed"))
    if landed:
        return Verdict(test, run_mode, False, f"NOT STOPPED: {landed[-1].group(2)}")
    return _stopped(incidents, PGTPROT_OOPS, "a pgtprot", test, run_mode)


# pgtprot's alias audit (guest step pgtaudit, debugfs pgtprot/audit): every
# page table reachable from the kernel's roots and every live user mm, and
# how many of them some leaf maps writable without the key. Run at boot and
# after the attack boot's workloads.
PGT_AUDIT_LABELS = ("boot", "workloads")
PGT_AUDIT_ALIASES = ("direct_map", "image", "user", "other")


def pgt_audit_step(label: str) -> str:
    return f"pgtaudit:{label}"


def pgt_audit_test(label: str) -> str:
    return f"PGTPROT_AUDIT[{label}]"


def pgt_audit(con: Console, label: str) -> Optional[dict]:
    """The audit's counts at `label`, None where it did not report."""
    st = con.steps.get(pgt_audit_step(label))
    for r in (st.results if st else []):
        if "pgtaudit" in r:
            return r["pgtaudit"]
    return None


def _aliases(a: dict) -> str:
    parts = [f"{a[f'writable_{k}']} {k.replace('_', ' ')}" for k in PGT_AUDIT_ALIASES
             if a.get(f"writable_{k}")]
    return f" ({', '.join(parts)})" if parts else ""


def judge_pgt_audit(con: Console, label: str, run_mode: str, pks: bool = True) -> Verdict:
    """Both sides of the audit: with pgtprot off (or refused) every table it
    found has a writable alias, which shows the audit can find one; with
    pgtprot on none may have."""
    test = pgt_audit_test(label)
    pgt = modes.pgt(run_mode)
    refusal = _pgt_refusal(con, test, run_mode, pks,
                           lambda: judge_pgt_audit(con, label, "off"))
    if refusal is not None:
        return refusal
    st = con.steps.get(pgt_audit_step(label))
    if st is None or not st.ended:
        return Verdict(test, run_mode, False, "the audit step did not run to its end")
    a = pgt_audit(con, label)
    if a is None:
        return Verdict(test, run_mode, False, "no audit in this kernel (CONFIG_PGTPROT_DEBUG)")
    tables, writable = a.get("tables", 0), a.get("writable", -1)
    if tables <= 0 or a.get("roots", 0) <= 0:
        return Verdict(test, run_mode, False, f"the audit found no page tables: {a}")
    if pgt == "off":
        if writable != tables:
            return Verdict(test, run_mode, False,
                           f"{writable} of {tables} tables writable with pgtprot off: audit broken")
        return Verdict(test, run_mode, True,
                       f"attack works: {writable} of {tables} tables writable{_aliases(a)}")
    if writable != 0:
        return Verdict(test, run_mode, False,
                       f"NOT STOPPED: {writable} of {tables} tables writable{_aliases(a)}")
    return Verdict(test, run_mode, True,
                   f"stopped: 0 of {tables} tables writable ({a.get('tables_in_image', 0)} in "
                   f"the kernel image, {a.get('user_mms', 0)} user mms)")


IMAGE_TAIL = "IMAGE_TAIL"


def judge_image_tail(con: Console, run_mode: str, pks: bool = True) -> Verdict:
    """The kernel image's mapping past _brk_end (the rest of its last 2M
    page) maps memory the page allocator hands out: with XPFO or pgtprot
    on, none of it may stay writable there (the audit after the
    workloads); with both off it is, which shows the count can fail."""
    label = PGT_AUDIT_LABELS[-1]
    a = pgt_audit(con, label)
    if a is None or "image_tail_writable" not in a:
        return Verdict(IMAGE_TAIL, run_mode, False, "no audit of the image's tail")
    n = a["image_tail_writable"]
    pgt_on = modes.pgt(run_mode) != "off" and pks and pgt_refused(con) is None
    if modes.xpfo(run_mode) == "off" and not pgt_on:
        if n <= 0:
            return Verdict(IMAGE_TAIL, run_mode, False,
                           "no writable page past _brk_end with protection off: audit broken?")
        return Verdict(IMAGE_TAIL, run_mode, True,
                       f"attack works: {n} pages past _brk_end writable through the image")
    if n:
        return Verdict(IMAGE_TAIL, run_mode, False,
                       f"NOT STOPPED: {n} pages past _brk_end writable through the image")
    return Verdict(IMAGE_TAIL, run_mode, True, "stopped: nothing past _brk_end mapped writable")


# coverage (guest/src/coverage.c): the frames userspace maps, by kind (the
# XPFO audit's umapped_* counts, taken while the program holds one mapping
# of each kind), against the frames XPFO owns. The kinds the GFP test is
# meant to catch must be owned in full in every protecting mode; "other"
# (kernel pages inserted into a process: the vDSO, packet and io_uring
# rings) is the documented miss, reported and not judged. With XPFO off
# none is owned: the count can tell a miss.
COVERAGE = "COVERAGE"
COVERAGE_FILE = "/mnt/scratch/coverage"
COVERED_KINDS = ("anon", "ksm", "shmem", "file")
UMAPPED_KINDS = COVERED_KINDS + ("other",)


def coverage_step(disk: bool = True) -> str:
    return "sh:coverage" + (f":{COVERAGE_FILE}" if disk else "")


def coverage(con: Console, disk: bool = True) -> Optional[dict]:
    """The coverage program's counts, None where it did not report any."""
    st = con.steps.get(coverage_step(disk))
    for r in st.results if st else []:
        if isinstance(r.get("coverage"), dict):
            return r["coverage"]
    return None


def _kinds(c: dict, owned: bool = False) -> str:
    """"anon 300, shmem 64" (frames mapped), or with @owned "anon 300/300"."""
    parts = []
    for k in UMAPPED_KINDS:
        n = c.get(f"umapped_{k}", 0)
        if n:
            parts.append(f"{k} {c.get(f'umapped_{k}_owned', 0)}/{n}" if owned else f"{k} {n}")
    return ", ".join(parts)


def judge_coverage(con: Console, run_mode: str, disk: bool = True) -> Verdict:
    st = con.steps.get(coverage_step(disk))
    if st is None or not st.ended:
        return Verdict(COVERAGE, run_mode, False, "the coverage step did not run to its end")
    c = coverage(con, disk)
    if c is None or "umapped_anon" not in c:
        return Verdict(COVERAGE, run_mode, False,
                       "no per-kind counts from the audit (CONFIG_XPFO_DEBUG)")
    need = ["anon", "shmem"] + (["file"] if disk else [])
    unmapped = [k for k in need if not c.get(f"umapped_{k}")
                or (k == "file" and not c.get("file"))]
    if unmapped:
        return Verdict(COVERAGE, run_mode, False,
                       f"the workload's {', '.join(unmapped)} frames were not mapped: {c}")
    owned = sum(c.get(f"umapped_{k}_owned", 0) for k in UMAPPED_KINDS)
    mapped = sum(c.get(f"umapped_{k}", 0) for k in UMAPPED_KINDS)
    mode = modes.xpfo(run_mode)
    if mode in OPEN_MODES:
        if owned:
            return Verdict(COVERAGE, run_mode, False,
                           f"{owned} frames owned with XPFO off: audit broken? ({_kinds(c, True)})")
        return Verdict(COVERAGE, run_mode, True,
                       f"not covered: all {mapped} user-mapped frames in the direct map "
                       f"({_kinds(c)})")
    missed = {k: c.get(f"umapped_{k}", 0) - c.get(f"umapped_{k}_owned", 0)
              for k in COVERED_KINDS}
    if any(missed.values()):
        return Verdict(COVERAGE, run_mode, False,
                       "NOT COVERED: " + ", ".join(f"{k} {n}" for k, n in missed.items() if n)
                       + f" frames userspace maps stay in the direct map (owned/mapped: "
                       f"{_kinds(c, True)})")
    return Verdict(COVERAGE, run_mode, True,
                   f"covered: owned/mapped {_kinds(c, True)}")


# predict (guest/src/predict.c): how often the next fault of a size gets
# the block just freed. An attacker who frees a block and faults again at
# once must not get it back but by chance in strict mode; with XPFO off
# the allocator hands it back (the other side: the measure can fail).
PREDICT_STEP = "sh:predict"
PREDICT_MODES = ("off", "strict")
# (name, result keys, limit on the share of trials in strict, whether the
# off side is judged). With XPFO off, 64K came back in 0 of 1000 once
# (2026-11-27, pgt-batched, 2 vCPUs), as 128K did in 0 of 200 before: a
# freed mTHP folio can sit in a per-CPU LRU batch past the next fault.
# The off side is judged on 4K and 2M, the rest reported.
PREDICT_ORDERS = (
    ("4K", "reuse", 0.01, True),    # the shuffled per-CPU refills
    ("64K", "mthp", 0.05, False),   # the random buddy pick, 1000 trials
    ("2M", "thp", 0.05, True),      # 200 trials
)
PREDICT_OTHER_LIMIT = 0.05      # every other mTHP size, 200 trials each
PREDICT_OFF_MIN = 0.5           # off: the block comes back at least this often
PREDICT_MIN_TRIALS = 0.9        # of the planned trials, the rest "small"


def predict_runs(run_mode: str) -> bool:
    return modes.xpfo(run_mode) in PREDICT_MODES


def _predict_one(test: str, run_mode: str, trials: int, same: int, small: int,
                 planned: int, limit: float, off_side: bool = True) -> Verdict:
    if trials < PREDICT_MIN_TRIALS * planned:
        return Verdict(test, run_mode, False,
                       f"only {trials} of {planned} trials got a large folio ({small} small)")
    share = f"{same} of {trials} ({100.0 * same / trials:.1f}%)"
    if modes.xpfo(run_mode) == "off":
        if not off_side:
            return Verdict(test, run_mode, True, f"reported: the block just freed came back "
                                                 f"in {share}")
        if same < PREDICT_OFF_MIN * trials:
            return Verdict(test, run_mode, False,
                           f"with XPFO off the block came back in only {share}: measure broken?")
        return Verdict(test, run_mode, True, f"attack works: the block just freed came back "
                                             f"in {share}")
    if same > limit * trials:
        return Verdict(test, run_mode, False, f"PREDICTABLE: the block just freed came back in "
                                              f"{share}, limit {100 * limit:.0f}%")
    return Verdict(test, run_mode, True, f"by chance only: {share}, limit {100 * limit:.0f}%")


def judge_predict(con: Console, run_mode: str) -> List[Verdict]:
    """One verdict per size predict measured: 4K, 64K, 2M and every other
    mTHP size the kernel offers."""
    st = con.steps.get(PREDICT_STEP)
    r = next((x["predict"] for x in (st.results if st else []) if "predict" in x), None)
    if st is None or not st.ended or r is None:
        return [Verdict("PREDICT", run_mode, False, "predict did not report")]
    out = []
    for name, key, limit, off_side in PREDICT_ORDERS:
        planned = 200 if key == "thp" else 1000
        same = r.get("reuse_same" if key == "reuse" else f"{key}_same", 0)
        trials = r.get("reuse_trials" if key == "reuse" else f"{key}_trials", 0)
        out.append(_predict_one(f"PREDICT[{name}]", run_mode, trials, same,
                                r.get(f"{key}_small", 0), planned, limit, off_side))
    other = r.get("mthp_other", {})
    if not other:
        out.append(Verdict("PREDICT[mTHP]", run_mode, False, "no other mTHP size measured"))
    for kb in sorted(other, key=int):
        o = other[kb]
        # off: reported, not judged (PREDICT_ORDERS)
        out.append(_predict_one(f"PREDICT[{kb}K]", run_mode, o.get("trials", 0),
                                o.get("same", 0), o.get("small", 0), 200, PREDICT_OTHER_LIMIT,
                                off_side=False))
    return out


DISK_ATTACKS = tuple(a.name for a in LKDTM_ATTACKS if a.needs_disk)
NO_DISK = "n/a (no disk on this machine)"


def _runs(a: Attack, cpus: int, disk: bool) -> bool:
    return a.min_cpus <= cpus and (disk or not a.needs_disk)


def lkdtm_steps(cpus: int, disk: bool = True) -> List[str]:
    return [f"lkdtm:{a.name}" for a in LKDTM_ATTACKS + PGTPROT_ATTACKS if _runs(a, cpus, disk)]


def not_applicable(cpus: int, disk: bool = True) -> Dict[str, str]:
    """The tests a machine cannot run (too few CPUs, no disk), and why;
    they are neither passes nor failures."""
    out = {a.name: (NO_DISK if a.min_cpus <= cpus else
                    f"n/a (needs {a.min_cpus} CPUs; {cpus} on this machine)")
           for a in LKDTM_ATTACKS if not _runs(a, cpus, disk)}
    if not disk:
        out.update({f"ret2dir[{v}]": NO_DISK for v in RET2DIR_DISK_VARIANTS})
    return out


def judge_all(con: Console, mode: str, cpus: int, disk: bool = True,
              pks: bool = True) -> List[Verdict]:
    out = [judge_read(con, f"lkdtm:{a.name}", a.name, mode, a.cleared_stops)
           for a in LKDTM_ATTACKS if _runs(a, cpus, disk)]
    out += [judge_pgt(con, f"lkdtm:{a.name}", a.name, mode, pks) for a in PGTPROT_ATTACKS]
    out += [judge_pgt_audit(con, label, mode, pks) for label in PGT_AUDIT_LABELS]
    out.append(judge_image_tail(con, mode, pks))
    out.append(judge_coverage(con, mode, disk))
    return out + judge_ret2dir(con, mode, disk)


RET2DIR_STEP = "sh:ret2dir"
RET2DIR_VARIANTS = ("anon", "cow", "shmem", "pagecache", "migrate", "migrate-old")
# the page cache of a file on the scratch disk's ext2 (without the disk the
# demo writes its file to the initramfs, which is not what it means)
RET2DIR_DISK_VARIANTS = ("pagecache",)


def judge_ret2dir(con: Console, run_mode: str, disk: bool = True) -> List[Verdict]:
    """The end-to-end demo: one verdict per variant, from its RESULT lines;
    without a disk, none for the variants that need one."""
    mode = modes.xpfo(run_mode)
    st = con.steps.get(RET2DIR_STEP)
    if st is None or not st.ended:
        return [Verdict("ret2dir", run_mode, False, "demo did not run to its end")]
    incidents = con.incidents_in(RET2DIR_STEP)
    by_variant = {r.get("variant"): r for r in st.results}
    out = []
    for v in RET2DIR_VARIANTS:
        if not disk and v in RET2DIR_DISK_VARIANTS:
            continue
        name = f"ret2dir[{v}]"
        r = by_variant.get(v)
        if r is None:
            out.append(Verdict(name, run_mode, False, "no result"))
        elif mode in OPEN_MODES:
            ok = r.get("outcome") == "read" and r.get("read") == r.get("wrote")
            out.append(Verdict(name, run_mode, ok,
                               f"read {r.get('read')}, user wrote {r.get('wrote')}"
                               if r.get("outcome") == "read" else f"outcome {r.get('outcome')}"))
        elif mode in PROTECTING_MODES:
            out.append(Verdict(name, run_mode, r.get("outcome") == "blocked",
                               f"outcome {r.get('outcome')}"))
        else:
            out.append(Verdict(name, run_mode, False, f"no expectation for mode {mode}"))
    blocked = sum(1 for r in st.results if r.get("outcome") == "blocked")
    xpfo = [i for i in incidents if i.mentions(XPFO_OOPS)]
    other = [i for i in incidents if not i.mentions(XPFO_OOPS)]
    if other or len(xpfo) != blocked:
        out.append(Verdict("ret2dir[oopses]", run_mode, False,
                           f"{len(xpfo)} XPFO oopses for {blocked} blocked reads, "
                           f"{len(other)} other incidents"
                           + (f": {other[0].first_line}" if other else "")))
    return out
