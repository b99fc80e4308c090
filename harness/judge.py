"""The one place that decides whether a guest run passed.

Every command that boots a guest (test, demo, stress, bench, the integration
tests) asks this module for a Verdict: a status and the reasons behind it.
Nothing else judges; the callers print the reasons and turn the status into
an exit code.

The rules, for every boot: the guest runs to its end (the runner reports a
result for every step of its plan and the guest powers off, before the
deadline); no kernel report (Oops, BUG, WARNING, panic, GPF, KASAN, UBSAN,
RCU stall, hung task) appears anywhere, except the XPFO oops that an attack
step expects in its own step; every RESULT line can be read. On top of that,
the attack tests and the KUnit suite must behave as the mode says
(attacks.py has the attack rules, KUNIT_* below the suite's).
"""

import enum
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from . import attacks, modes, qemu
from .console import Console


class Status(enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"     # the guest ran to its end, and something it reported is wrong
    CRASHED = "crashed"     # the guest did not run to its end (panic, deadline, QEMU)


_RANK = {Status.SUCCESS: 0, Status.FAILURE: 1, Status.CRASHED: 2}


@dataclass(frozen=True)
class Verdict:
    status: Status
    reasons: Tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status is Status.SUCCESS

    def to_dict(self) -> Dict[str, object]:
        return {"status": self.status.value, "reasons": list(self.reasons)}


SUCCESS = Verdict(Status.SUCCESS)


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """One verdict for several: the worst status, every reason."""
    status, reasons = Status.SUCCESS, []  # type: Status, List[str]
    for v in verdicts:
        if _RANK[v.status] > _RANK[status]:
            status = v.status
        reasons.extend(v.reasons)
    return Verdict(status, tuple(reasons))


def _failure(reasons: Sequence[str]) -> Verdict:
    return Verdict(Status.FAILURE, tuple(reasons)) if reasons else SUCCESS


def outcome(run: qemu.Run) -> Verdict:
    """Did the guest run to its end?"""
    if run.outcome is qemu.Outcome.POWERED_OFF and run.console.runner_finished():
        return SUCCESS
    con = run.console
    what = run.message or f"guest {run.outcome.value}"
    if con.planned is not None:
        what += f" ({con.reported} of {con.planned} steps reported)"
    return Verdict(Status.CRASHED, (f"{what}; log {run.log}",))


def incidents(con: Console, allowed_steps: Sequence[str] = ()) -> Verdict:
    """Kernel reports outside the steps that declare an expected XPFO oops.

    In an allowed step only XPFO and pgtprot oopses are allowed; the attack
    rules (attacks.py) judge those."""
    bad = [f"{i.kind} during {i.step or 'boot'}: {i.first_line}"
           for i in con.incidents
           if i.step not in allowed_steps
           or not (i.mentions(attacks.XPFO_OOPS) or i.mentions(attacks.PGTPROT_OOPS))]
    return _failure(bad)


def results_readable(con: Console) -> Verdict:
    return _failure([f"unreadable result: {e}" for e in con.errors])


def step_exits(con: Console, steps: Optional[Sequence[str]] = None) -> Verdict:
    """Every step (or those named) that ran to its end exited with status 0."""
    names = con.order if steps is None else [s for s in steps if s in con.steps]
    return _failure([f"step {n} exited with status {con.steps[n].exit_status}"
                     for n in names if con.steps[n].ended and con.steps[n].exit_status])


def boot(run: qemu.Run, allowed_steps: Sequence[str] = (), exits: bool = True) -> Verdict:
    """Any boot: it ran to its end, no kernel report (except an expected
    XPFO oops in `allowed_steps`), readable results and, with `exits`,
    every step exited with 0."""
    parts = [outcome(run), incidents(run.console, allowed_steps),
             results_readable(run.console)]
    if exits:
        parts.append(step_exits(run.console))
    return worst(parts)


def bench_boot(run: qemu.Run) -> Verdict:
    """One benchmark boot: any kernel report anywhere in it (no step expects
    one) or a guest that did not run to its end fails the whole boot.
    Step exit statuses are the benchmark's to judge, per workload."""
    return boot(run, exits=False)


# The xpfo KUnit suite: in a protecting mode every case passes, except the
# cases that need another mode, which skip themselves; with xpfo=off every
# case skips itself (it must not pass vacuously).
KUNIT_SUITE = "xpfo"
KUNIT_MODE_ONLY = {"xpfo_test_batch_reuse": ("batched",),
                   "xpfo_test_strict_free_to_tail": ("strict",),
                   "xpfo_test_strict_large_reuse": ("strict",),
                   "xpfo_test_never_user": ("batched", "strict"),
                   "xpfo_test_zeroed_batch": ("strict",),
                   "xpfo_test_zeroed_passed": ("strict",),
                   "xpfo_test_zeroed_gfp_zero": ("strict",),
                   "xpfo_test_zero_idle": ("strict",),
                   "xpfo_test_zero_idle_calm": ("strict",),
                   "xpfo_test_strict_hot_reuse": ("strict",),
                   "xpfo_test_quiet_cpu_flushes": ("strict",),
                   "xpfo_test_refill_ahead": ("strict",),
                   "xpfo_test_random_ahead": ("strict",),
                   "xpfo_test_remote_ahead": ("strict",),
                   "xpfo_test_refill_owned": ("strict",),
                   "xpfo_test_remote_migrate": ("sync", "strict"),
                   "xpfo_test_remote_bulk": ("sync", "strict"),
                   "xpfo_test_remote_order4": ("sync", "strict"),
                   "xpfo_test_freed_thp_cleared": ("sync", "deferred")}
# The pgtprot suite, judged the same way on the pgtprot part of the mode.
PGT_KUNIT_SUITE = "pgtprot"
_PGT_SECTIONS = ("batched",)
# xpfo cases that need pgtprot's sections as well: they must run where the
# mode's pgtprot part is one of these (and its XPFO part protects)
KUNIT_PGT_ONLY = {"xpfo_test_slots_one_window": _PGT_SECTIONS,
                  "xpfo_test_iter_atomic_one_window": _PGT_SECTIONS}
PGT_KUNIT_MODE_ONLY = {"pgtprot_test_section_window": _PGT_SECTIONS,
                       "pgtprot_test_irq_in_section": _PGT_SECTIONS,
                       "pgtprot_test_softirq_in_section": _PGT_SECTIONS,
                       "pgtprot_test_section_pins_cpu": _PGT_SECTIONS}


# The direct map's global bit after CPA round trips: every case passes in
# every mode, xpfo=off included (the policy is the kernel's, not XPFO's).
GLOBAL_KUNIT_SUITE = "xpfo_global"


def _suite(con: Console, suite: str, name: str) -> Tuple[list, List[str]]:
    """A KUnit suite's cases, and what is wrong with how they reported:
    none did, or fewer than the suite's plan."""
    cases = [c for c in con.ktap if c.suite == suite]
    if not cases:
        return cases, [f"{name}: did not run"]
    plan = con.ktap_plans.get(suite)
    if plan is not None and len(cases) != plan:
        return cases, [f"{name}: {len(cases)} of its {plan} cases reported"]
    return cases, []


# xpfo_global cases whose claim is about PTI off (the kernel image stays
# global whatever xpfo_dmap= says): under PTI, which decides the image's
# global bit itself, they skip, and only then
GLOBAL_KUNIT_PTI_OFF_ONLY = ("xpfo_global_test_image",)
PTI_LINE = re.compile(r"Kernel/User page tables isolation: (force )?enabled")


def kunit_global(con: Console, run_mode: str) -> Verdict:
    name = f"KUnit {GLOBAL_KUNIT_SUITE} suite, {modes.label(run_mode)}"
    cases, bad = _suite(con, GLOBAL_KUNIT_SUITE, name)
    if not cases:
        return _failure(bad)
    pti = any(PTI_LINE.search(line) for line in con.lines)
    bad += [f"{name}: {c.name} {'failed' if c.status == 'fail' else 'skipped'}"
            for c in cases if c.status != "pass"
            and not (c.status == "skip" and pti and c.name in GLOBAL_KUNIT_PTI_OFF_ONLY)]
    return _failure(bad)


def kunit_counts(con: Console, suite: str = KUNIT_SUITE) -> Dict[str, int]:
    counts = {"pass": 0, "fail": 0, "skip": 0}
    for case in con.ktap:
        if case.suite == suite:
            counts[case.status] += 1
    return counts


# xpfo cases whose skip in these modes says the scenario did not arise,
# not that the protection failed: in strict, xpfo_test_remote_order4 needs
# the freed 64K block to come back, and strict's random pick among the
# free blocks (or a merge with a free buddy) can keep it away for every
# try. The case is required in sync, and strict's 64K reuse is attacked
# by lkdtm's XPFO_SMP_MTHP in every strict boot.
KUNIT_MAY_NOT_ARISE = {"xpfo_test_remote_order4": ("strict",)}

# xpfo cases that need a second CPU (another CPU's TLB to flush): on one
# CPU they skip themselves, which fails nothing
KUNIT_MIN_CPUS = {"xpfo_test_quiet_cpu_flushes": 2, "xpfo_test_refill_ahead": 2,
                  "xpfo_test_random_ahead": 2, "xpfo_test_remote_ahead": 2,
                  "xpfo_test_remote_migrate": 2, "xpfo_test_remote_bulk": 2,
                  "xpfo_test_remote_order4": 2}


def kunit(con: Console, run_mode: str, suite: str = KUNIT_SUITE, cpus: int = 2) -> Verdict:
    """A suite's cases in one mode: the xpfo suite on the mode's XPFO part,
    the pgtprot suite on its pgtprot part ("off" is the open side), in a
    guest with `cpus` CPUs."""
    pgt = suite == PGT_KUNIT_SUITE
    mode = modes.pgt(run_mode) if pgt else modes.xpfo(run_mode)
    only = PGT_KUNIT_MODE_ONLY if pgt else KUNIT_MODE_ONLY
    name = f"KUnit {suite} suite, {'pgtprot' if pgt else 'xpfo'}={mode}"
    cases, bad = _suite(con, suite, name)
    if not cases:
        return _failure(bad)
    bad += [f"{name}: {c.name} failed" for c in cases if c.status == "fail"]
    if mode == "off":
        bad += [f"{name}: {c.name} passed, but with the protection off it must skip itself"
                for c in cases if c.status == "pass"]
    else:
        part = modes.pgt(run_mode)
        bad += [f"{name}: {c.name} skipped" for c in cases if c.status == "skip"
                and mode in only.get(c.name, (mode,))
                and (pgt or mode not in KUNIT_MAY_NOT_ARISE.get(c.name, ()))
                and (pgt or part in KUNIT_PGT_ONLY.get(c.name, (part,)))
                and cpus >= KUNIT_MIN_CPUS.get(c.name, 1)]
        if not any(c.status == "pass" for c in cases):
            bad.append(f"{name}: no case passed")
    return _failure(bad)


@dataclass(frozen=True)
class AttackRun:
    """The verdict of one attack-test boot and what it was made of."""

    verdict: Verdict
    tests: List[attacks.Verdict] = field(default_factory=list)
    kunit: Dict[str, int] = field(default_factory=dict)
    kunit_pgtprot: Dict[str, int] = field(default_factory=dict)


def attack_steps(cpus: int) -> List[str]:
    """The steps in which an attack test expects an XPFO oops."""
    return attacks.lkdtm_steps(cpus) + [attacks.RET2DIR_STEP]


def attack_run(run: qemu.Run, mode: str, cpus: int, with_kunit: bool = True,
               predict: bool = False) -> AttackRun:
    """A boot of the attack tests (and the KUnit suite) in one mode; with
    `predict`, the predict step's reuse counts too."""
    con = run.console
    # a machine without a disk does not run the tests that need one
    kind = run.machine.kind
    verdicts = attacks.judge_all(con, mode, cpus, disk=kind.has_disk, pks=kind.has_pks)
    if predict:
        verdicts += attacks.judge_predict(con, mode)
    parts = [boot(run, allowed_steps=attack_steps(cpus)),
             _failure([f"{v.test} ({modes.label(mode)}): {v.detail}"
                       for v in verdicts if not v.passed])]
    if GLOBAL_STEPS[0] in con.steps:
        parts.append(_failure(global_reasons(con)))
    counts: Dict[str, Dict[str, int]] = {}
    if with_kunit:
        # where pgtprot was refused (no PKS: judged with the attacks above)
        # the suites run as with pgtprot off: its suite skips itself, and so
        # do the xpfo cases that need its sections
        effective = mode if attacks.pgt_refused(con) is None else modes.xpfo(mode)
        parts.append(kunit(con, effective, cpus=cpus))
        counts[KUNIT_SUITE] = kunit_counts(con)
        parts.append(kunit_global(con, mode))
        counts[GLOBAL_KUNIT_SUITE] = kunit_counts(con, GLOBAL_KUNIT_SUITE)
        # a kernel without pgtprot has no suite: required only where it is on
        if modes.pgt(mode) != "off" or any(c.suite == PGT_KUNIT_SUITE for c in con.ktap):
            parts.append(kunit(con, effective, PGT_KUNIT_SUITE))
            counts[PGT_KUNIT_SUITE] = kunit_counts(con, PGT_KUNIT_SUITE)
    return AttackRun(worst(parts), verdicts, counts.get(KUNIT_SUITE, {}),
                     counts.get(PGT_KUNIT_SUITE, {}))


# global_stray: present direct-map entries whose global bit is not the
# kernel's policy (global with PGE and without PTI), in every mode
AUDIT_BAD = ("mapped_user", "absent_kernel", "global_stray")
# kept frames counted on the free lists against the kernel's running count
# (the audit's kept_counted, debugfs xpfo/kept): frames that change hands
# between the drain and the walk (the audit's own reader, a kworker) may
# separate them by a few
KEPT_SLACK = 64


def audits(con: Console) -> Dict[str, Optional[Dict[str, int]]]:
    """The audit steps' results by label: None where the kernel has no XPFO."""
    out: Dict[str, Optional[Dict[str, int]]] = {}
    for name, st in con.steps.items():
        if name == "audit" or name.startswith("audit:"):
            for r in st.results:
                if "audit" in r:
                    out[str(r.get("label", name))] = r["audit"]
    return out


def hotplug(con: Console) -> Dict[str, int]:
    """What the hotplug step did: blocks tried, cycled, frames mapped back."""
    st = con.steps.get("hotplug")
    return next((r["hotplug"] for r in (st.results if st else [])
                 if isinstance(r.get("hotplug"), dict)), {})


# CPA round trips driven from userspace (memfd_secret()), then the audit's
# count of direct-map entries whose global bit is off the kernel's policy
GLOBAL_STEPS = ("sh:secret", "audit:cpa")


def global_reasons(con: Console) -> List[str]:
    """After the GLOBAL_STEPS: the secret program did its round trips (or
    the kernel has no memfd_secret) and the audit found no stray entry."""
    st = con.steps.get(GLOBAL_STEPS[0])
    res = next((r["secret"] for r in (st.results if st else []) if "secret" in r), None)
    if res is None:
        return [f"{GLOBAL_STEPS[0]}: no result"]
    reasons = []
    if res.get("status") not in ("pass", "unsupported"):
        reasons.append(f"{GLOBAL_STEPS[0]}: {res.get('status')}")
    a = audits(con).get("cpa", {})
    if a is not None and a.get("global_stray") != 0:
        reasons.append("direct-map audit after memfd_secret round trips: "
                       f"global_stray {a.get('global_stray')} (present entries whose "
                       "global bit is off the policy)")
    return reasons


def audit_reasons(con: Console) -> List[str]:
    """Each audit that found a frame whose direct-map entry and owner disagree."""
    reasons = []
    for label, a in audits(con).items():
        if a is None:
            continue
        # global_stray is absent from the audits of kernels before it
        bad = {k: a.get(k) for k in AUDIT_BAD
               if a.get(k) != 0 and (k in a or k != "global_stray")}
        if bad:
            reasons.append(f"direct-map audit after {label}: "
                           + ", ".join(f"{k} {v}" for k, v in bad.items()))
        # a second reading (the step's, when the first two differed) decides:
        # frames in flight between the drain and the walk settle, a leak stays
        kept = a.get("kept_reread", a.get("kept"))
        counted = a.get("kept_counted_reread", a.get("kept_counted", 0))
        if kept is not None and abs(kept - counted) > KEPT_SLACK:
            reasons.append(f"direct-map audit after {label}: {kept} kept frames on "
                           f"the free lists, the running count says {counted}"
                           + (" (read twice)" if "kept_reread" in a else ""))
    return reasons


def stress_run(run: qemu.Run, step: str) -> Verdict:
    """A stress boot: a clean boot, the stress program's own verdict, the
    direct-map audits after it, and memory offline/online having happened."""
    con = run.console
    st = con.steps.get(step)
    total = next((r for r in (st.results if st else []) if r.get("worker") == "all"), {})
    own = [] if total.get("status") == "pass" else [
        f"stress reported {total.get('status', 'nothing')}"
        + (f" ({total.get('failed')} workers failed)" if total.get("failed") else "")]
    if "hotplug" in con.steps and not hotplug(con).get("cycled"):
        own.append("hotplug: no memory block was offlined and onlined again")
    return worst([boot(run), _failure(own + audit_reasons(con))])


def bench_failures(failures: Sequence[Dict[str, object]]) -> Verdict:
    """A benchmark run: each failed cell (mode, vCPUs, workload) is a reason."""
    return _failure([f"benchmark {f.get('workload', '?')} {modes.label(str(f.get('mode', '?')))} "
                     f"{f.get('cpus', '?')} vCPUs: {f.get('reason', '?')}" for f in failures])
