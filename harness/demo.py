"""`./xpfo demo`, the main job: build the kernel, boot it once per XPFO mode
and once in the recommended configuration (xpfo=strict pgtprot=batched) to
show every attack on both sides, then a quick side-by-side benchmark. Each
stage says what it is expected to take before it starts and what it took
when it ends."""

import time
from typing import Optional

from . import attack_runs, bench, build, judge, modes, printer
from .paths import LAYOUT, Layout

# the attack boots: every XPFO mode (pgtprot off), then the recommended
# configuration, which adds pgtprot to strict
ATTACK_MODES = modes.XPFO_MODES + (modes.RECOMMENDED,)
# the quick benchmark: the same modes, 2 vCPUs, 2 rounds
QUICK_BENCH_MODES = modes.XPFO_MODES + (modes.RECOMMENDED,)
BENCH_CPUS = (2,)
BENCH_ROUNDS = 2
STAGE = "demo"


def _done(what: str, start: float) -> None:
    printer.info(STAGE, f"{what}: done in {printer.fmt_elapsed(time.monotonic() - start)}")


def run(jobs: Optional[int] = None, layout: Layout = LAYOUT) -> int:
    """The whole demo; the exit status (0: every stage behaved as expected)."""
    begin = time.monotonic()
    build.ensure_kernel(jobs)
    _done("build", begin)

    start = time.monotonic()
    printer.info(STAGE, "attack tests: the same kernel booted with xpfo="
                 + ", ".join(modes.XPFO_MODES) + f", and with {modes.label(modes.RECOMMENDED)}"
                 f", the recommended configuration (the column marked "
                 f"'{attack_runs.RECOMMENDED_MARK}')")
    results = attack_runs.run_each(ATTACK_MODES, stage=STAGE)
    attack_runs.print_table(results, recommended=modes.RECOMMENDED)
    _done("attack boots", start)

    start = time.monotonic()
    n = len(QUICK_BENCH_MODES) * len(BENCH_CPUS) * BENCH_ROUNDS
    estimate = bench.estimate(len(QUICK_BENCH_MODES), BENCH_CPUS, BENCH_ROUNDS, quick=True)
    printer.info(STAGE, f"quick side-by-side benchmark of the modes: {n} boots, "
                 f"~{printer.fmt_elapsed(estimate)} estimated (the bench prints the time "
                 "left after each boot)")
    data = bench.run_and_report(list(QUICK_BENCH_MODES), list(BENCH_CPUS), BENCH_ROUNDS, True,
                                layout.out / "bench-quick",
                                bench.command_line(QUICK_BENCH_MODES, BENCH_CPUS, BENCH_ROUNDS,
                                                   quick=True))
    _done("bench", start)

    verdict = judge.worst([judge.Verdict(judge.Status(r["status"]), tuple(r["reasons"]))
                           for r in results] + [judge.bench_failures(data.failures)])
    for reason in verdict.reasons:
        printer.raw(f"FAIL: {reason}")
    total = printer.fmt_elapsed(time.monotonic() - begin)
    printer.info(STAGE, f"done in {total}" if verdict.passed else
                 f"FAILED ({verdict.status.value}) after {total}: the attack tests, KUnit or "
                 "the benchmark did not behave as expected")
    return 0 if verdict.passed else 1
