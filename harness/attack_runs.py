"""The attack boots: one boot of the kernel per mode (and machine kind) that
runs every attack step and the KUnit suites, judged by judge.attack_run; and
the table of their verdicts, one column per boot.

attacks.py says what each attack is and how one is judged from the console;
this module boots them and shows the results.
"""

import dataclasses
import time
import warnings
from pathlib import Path
from typing import List, Optional, Sequence

from . import attacks, guest, judge, machines, modes, printer, qemu
from .console import Console
from .paths import LAYOUT, Layout, write_json

# the modes `./xpfo test` boots by default (and the integration tests): the
# XPFO modes and the pgtprot ones; the non-global direct map's on request
TEST_MODES = modes.XPFO_MODES + modes.PGT_RUN_MODES
# what one attack boot takes, for an estimate before a run of several: on
# the 2-core QEMU TCG host of the README's timings, 2026-11-27, off took
# 13 s, sync 49 s, strict 55 s and strict+pgt-batched 63-65 s (KUnit
# included); a loaded host takes longer
BOOT_ESTIMATE_S = 50.0
# a boot's deadline and vCPUs as `./xpfo demo` runs them
DEMO_CPUS = 2
DEMO_TIMEOUT = 900
# an attack boot's deadline in the test suite (check_run()): the longest
# took 65 s on QEMU (strict with pgtprot) and 135 s on Bochs, where a
# deadline is this times the kind's slowdown (machines.py)
CHECK_TIMEOUT = 300
CHECK_TIMEOUT_BOCHS = 100


def steps(cpus: int, disk: bool = True) -> List[str]:
    """The attack boot's steps; without a disk, none that needs one (the
    symlink step checks tmpfs and ramfs then, and ret2dir skips nothing:
    its page-cache variant is judged n/a)."""
    first, last = attacks.PGT_AUDIT_LABELS
    return ["info", attacks.pgt_audit_step(first), *(["disk"] if disk else []), "symlink",
            *attacks.lkdtm_steps(cpus, disk), attacks.RET2DIR_STEP, attacks.coverage_step(disk),
            *judge.GLOBAL_STEPS, "vmstat",
            attacks.pgt_audit_step(last)]


def run(mode: str, cpus: int, timeout: float, kunit: bool = True,
        machine: str = machines.DEFAULT, kernel: Optional[Path] = None,
        predict: Optional[bool] = None, label: Optional[str] = None,
        retry_hung: bool = False) -> dict:
    """One attack boot in `mode`, judged: the result `./xpfo test` records.
    @kernel: another image than the series' build (series-check --boot);
    @predict: run the predict step or not (default: where the mode has it
    and the machine is QEMU); @label: the log's name; @retry_hung: a boot
    killed at its deadline is booted once more, and the result says so
    ("hung_before": the first boot's log and last lines, its CPUs'
    backtraces among them). A crash is never retried."""
    kind = machines.get(machine)
    cpus = kind.vcpus(cpus)
    params = modes.params(mode) + ["hugepages=4"]
    if kunit:
        # every suite the test kernel has: xpfo and pgtprot
        params += ["kunit.enable=1"]
    label = label or (f"attacks-{mode}"
                      + ("" if kind.name == machines.DEFAULT else f"-{kind.name}"))
    if predict is None:
        # predict's faults of up to 2M each take minutes at Bochs's speed
        predict = attacks.predict_runs(mode) and kind.emulator == machines.QEMU
    boot_steps = steps(cpus, kind.has_disk) + ([attacks.PREDICT_STEP] if predict else [])
    req = guest.GuestRequest(steps=boot_steps, cpus=cpus, mem_mb=1024,
                             params=params, timeout=timeout, disk=kind.has_disk,
                             label=label, machine=kind.name, kernel=kernel)
    r = guest.run(req)
    hung = None
    if retry_hung and r.outcome is qemu.Outcome.TIMEOUT:
        hung = {"log": str(r.log), "tail": r.last_lines(80)}
        printer.warn(f"{label} hung (log {r.log}): booting it once more")
        r = guest.run(dataclasses.replace(req, label=f"{label}-again"))
    con = r.console
    j = judge.attack_run(r, mode, cpus, with_kunit=kunit, predict=predict)
    stray = judge.incidents(con, judge.attack_steps(cpus)).reasons
    info = next(iter(con.steps["info"].results), {}) if "info" in con.steps else {}
    return {
        "mode": mode, "cpus": cpus, "machine": kind.name, "outcome": r.outcome.value,
        "log": str(r.log), "info": info,
        # the console's end, where the log may not outlive the run (CI)
        "tail": "" if r.outcome is qemu.Outcome.POWERED_OFF else r.last_lines(80),
        "hung_before": hung,
        "verdicts": [v.__dict__ for v in j.tests],
        "not_applicable": attacks.not_applicable(cpus, kind.has_disk),
        "stray_incidents": list(stray),
        "kunit": j.kunit,
        "kunit_pgtprot": j.kunit_pgtprot,
        "kunit_cases": [c.__dict__ for c in con.ktap
                        if c.suite in (judge.KUNIT_SUITE, judge.PGT_KUNIT_SUITE)],
        # why the kernel refused pgtprot (a CPU without PKS), or None
        "pgt_refused": attacks.pgt_refused(con),
        **j.verdict.to_dict(),
        "passed": j.verdict.passed,
    }


def hung_note(result: dict) -> Optional[str]:
    """What a result that run(retry_hung=True) booted twice says of its
    first boot, killed at its deadline; None where it booted once."""
    hung = result.get("hung_before")
    if not hung:
        return None
    return (f"attacks-{result['mode']} on {result['machine']}: the first boot hung and "
            f"was killed at its deadline (log {hung['log']}); the second ended "
            f"{result['outcome']}. Its last console lines:\n{hung['tail']}")


def check_run(mode: str, machine: str = machines.DEFAULT) -> dict:
    """An attack boot of the test suite, 2 vCPUs: one that hangs is booted
    once more (docs/TESTING.md), and the first one's end, its CPUs'
    backtraces among it, goes to the warnings summary."""
    timeout = (CHECK_TIMEOUT if machines.get(machine).emulator == machines.QEMU
               else CHECK_TIMEOUT_BOCHS)
    result = run(mode, cpus=2, timeout=timeout, machine=machine, retry_hung=True)
    note = hung_note(result)
    if note:
        warnings.warn(note, stacklevel=2)
    return result


def run_suite(run_modes: Sequence[str], kinds: Sequence[str], cpus: int, timeout: float,
              layout: Layout = LAYOUT) -> bool:
    """`./xpfo test`: every mode on every machine kind, the table, and
    out/test-results.json; true when every boot passed."""
    results = [run(mode, cpus, timeout, machine=name) for name in kinds for mode in run_modes]
    print_table(results)
    ok = all(r["passed"] for r in results)
    write_json(layout.out / "test-results.json", {"results": results, "passed": ok,
                                                  "machines": list(kinds)})
    printer.info("test", "all passed" if ok else "FAILED")
    return ok


def run_each(run_modes: Sequence[str], cpus: int = DEMO_CPUS, timeout: float = DEMO_TIMEOUT,
             stage: str = "demo") -> List[dict]:
    """One boot per mode on the default machine, with an estimate before
    the first and the time left after each."""
    n = len(run_modes)
    printer.info(stage, f"{n} attack boots, ~{printer.fmt_elapsed(BOOT_ESTIMATE_S)} each: "
                 f"~{printer.fmt_elapsed(BOOT_ESTIMATE_S * n)} estimated")
    start = time.monotonic()
    results = []
    for i, mode in enumerate(run_modes, 1):
        results.append(run(mode, cpus, timeout))
        elapsed = time.monotonic() - start
        left = elapsed / i * (n - i)
        printer.info(stage, f"attack boot {i}/{n} ({modes.label(mode)}) done, "
                     f"{printer.fmt_elapsed(elapsed)} elapsed"
                     + (f", ~{printer.fmt_elapsed(left)} left" if i < n else ""))
    return results


def judge_log(con: Console, mode: str, cpus: int, machine: str = machines.DEFAULT) -> List[str]:
    """The attack verdicts of a saved log (`./xpfo parse --mode`), a line each."""
    kind = machines.get(machine)
    return [f"{'PASS' if v.passed else 'FAIL'} {v.test} ({v.mode}): {v.detail}"
            for v in attacks.judge_all(con, mode, cpus, disk=kind.has_disk, pks=kind.has_pks)]


# the table's rows in the catalogue's order; others after them
TEST_ORDER = ([a.name for a in attacks.LKDTM_ATTACKS + attacks.PGTPROT_ATTACKS]
              + [attacks.pgt_audit_test(label) for label in attacks.PGT_AUDIT_LABELS]
              + [attacks.IMAGE_TAIL, attacks.COVERAGE, "ret2dir"]
              + [f"ret2dir[{v}]" for v in attacks.RET2DIR_VARIANTS] + ["ret2dir[oopses]"])
RECOMMENDED_MARK = "recommended"
REFUSED_MARK = "pgtprot refused"


def refusal(r: dict) -> Optional[str]:
    """Why the run's kernel refused pgtprot, or None where it did not (or
    the mode has pgtprot off). A result saved before it recorded the reason
    shows a refusal in its verdicts (attacks.REFUSED)."""
    if modes.pgt(r["mode"]) == "off":
        return None
    if r.get("pgt_refused"):
        return str(r["pgt_refused"])
    if any(str(v.get("detail", "")).startswith(attacks.REFUSED) for v in r["verdicts"]):
        return "no PKS on this machine"
    return None


def print_table(results: Sequence[dict], recommended: Optional[str] = None) -> None:
    """One column per run: a mode, and with other machines than the default
    one, the machine kind too. The column of the `recommended` mode says
    so; a run whose kernel refused pgtprot (a CPU without PKS) says so in
    its heading and below the table."""
    kinds = {r.get("machine", machines.DEFAULT) for r in results}
    named = kinds != {machines.DEFAULT}

    def column(r: dict) -> str:
        label = modes.label(r["mode"])
        return f"{label}, {r.get('machine', machines.DEFAULT)}" if named else label

    def heading(r: dict) -> str:
        marks = ([RECOMMENDED_MARK] if recommended and r["mode"] == recommended else []) \
            + ([REFUSED_MARK] if refusal(r) else [])
        return column(r) + (f" ({'; '.join(marks)})" if marks else "")

    printer.raw("")
    printer.raw("| test | " + " | ".join(heading(r) for r in results) + " |")
    printer.raw("|---|" + "---|" * len(results))
    names: List[str] = []
    for r in results:
        for n in [v["test"] for v in r["verdicts"]] + list(r.get("not_applicable", {})):
            if n not in names:
                names.append(n)
    first = {n: i for i, n in enumerate(names)}
    names.sort(key=lambda n: (TEST_ORDER.index(n) if n in TEST_ORDER else len(TEST_ORDER),
                              first[n]))
    for n in names:
        cells = []
        for r in results:
            v = next((v for v in r["verdicts"] if v["test"] == n), None)
            na = r.get("not_applicable", {}).get(n)
            cells.append(na if v is None and na else "-" if v is None else
                         f"{'PASS' if v['passed'] else 'FAIL'}: {v['detail']}")
        printer.raw(f"| {n} | " + " | ".join(cells) + " |")
    if recommended and any(r["mode"] == recommended for r in results):
        printer.raw(f"({RECOMMENDED_MARK}): {modes.label(recommended)}, the recommended "
                    "configuration (pgtprot needs a CPU with PKS)")
    for r in results:
        why = refusal(r)
        if why:
            printer.raw(f"{REFUSED_MARK} in {column(r)}: {why} (the kernel ran "
                        "without pgtprot)")
    for r in results:
        for suite, key in (("xpfo", "kunit"), ("pgtprot", "kunit_pgtprot")):
            k = r.get(key) or {}
            if k:
                printer.raw(f"KUnit {suite} suite, {column(r)}: {k['pass']} "
                            f"passed, {k['fail']} failed, {k['skip']} skipped")
    for r in results:
        for reason in r["reasons"]:
            printer.raw(f"FAIL {column(r)}: {reason}")
    printer.raw("")
