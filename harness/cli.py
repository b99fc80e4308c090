"""Command line: each subcommand is one stage or a pipeline of stages."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from . import (attacks, bench, bochs, build, buildload, console, deps, errors, guest, initramfs,
               judge, machines, modes, printer, qemu, report, selftests, series, source)
from . import configs
from .errors import HarnessError
from .paths import LAYOUT

MODES = modes.XPFO_MODES
# every mode a command takes: the XPFO modes, the pgtprot ones and the
# non-global direct map's; `test` runs all but the last by default
ALL_MODES = modes.ALL_MODES
TEST_MODES = modes.XPFO_MODES + modes.PGT_RUN_MODES
BENCH_MODES = (bench.VANILLA,) + MODES
QUICK_BUILD_FILES = 8


def _write_json(path: Path, data: object) -> None:
    """Write atomically: a failed run never leaves a half-written result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def ensure_kernel(args: argparse.Namespace, force_build: bool = False) -> None:
    """deps -> source -> config -> build -> initramfs, each skipped when current."""
    deps.ensure(quiet=True)
    source.prepare(LAYOUT)
    req = build.request(LAYOUT, jobs=getattr(args, "jobs", None))
    # a second ./xpfo started while one builds waits for it, then boots
    # what it built, rather than running make over the same objects
    with build.lock(req):
        if force_build or not build.is_current(req):
            r = build.configure(req)
            if r.status is not build.Status.SUCCESS:
                raise HarnessError(f"kernel config failed: {r.message}")
            r = build.build(req)
            if r.status is not build.Status.SUCCESS:
                raise HarnessError(f"kernel build failed:\n{r.message}",
                                   "fix the series in build/src, then ./xpfo build")
        initramfs.build(LAYOUT)


def cmd_setup(args: argparse.Namespace) -> int:
    deps.ensure()
    return 0


def cmd_source(args: argparse.Namespace) -> int:
    deps.ensure(quiet=True)
    src = source.prepare(LAYOUT, force=args.force)
    printer.info("source", f"kernel tree ready: {src} (edit, commit, then ./xpfo export)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    source.export(LAYOUT)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    source.prepare(LAYOUT)
    r = build.configure(build.request(LAYOUT, jobs=args.jobs))
    if r.status is not build.Status.SUCCESS:
        raise HarnessError(f"kernel config failed: {r.message}")
    printer.info("config", f"{LAYOUT.obj / '.config'}: every fragment option took effect")
    return 0


def ensure_vanilla(args: argparse.Namespace, force: bool = False) -> Path:
    """The kernel without the series, for the 'vanilla' benchmark mode."""
    source.prepare(LAYOUT)
    req = build.vanilla_request(LAYOUT, jobs=getattr(args, "jobs", None))
    if force or not build.is_current(req):
        for step in (build.configure, build.build):
            r = step(req)
            if r.status is not build.Status.SUCCESS:
                raise HarnessError(f"vanilla kernel {r.status.value}: {r.message}")
    return req.obj / "arch/x86/boot/bzImage"


def cmd_build(args: argparse.Namespace) -> int:
    if args.vanilla:
        kernel = ensure_vanilla(args, force=True)
        printer.info("build", f"vanilla kernel (no series) {kernel}")
        return 0
    ensure_kernel(args, force_build=True)
    printer.info("build", f"kernel {LAYOUT.bzimage}, initramfs {LAYOUT.initramfs}")
    return 0


def _params(args: argparse.Namespace) -> List[str]:
    params = list(args.param or [])
    if getattr(args, "mode", None):
        params[:0] = modes.params(args.mode)
    return params


def _check_machine(name: str, steps: Sequence[str] = (), install: bool = True) -> machines.Kind:
    """An unknown machine, a step it cannot run or a missing emulator fails
    before any build; `install`: Bochs's packages are installed first."""
    kind = machines.get(name)
    guest.check_steps(kind, steps)
    if install and kind.emulator == machines.BOCHS:
        bochs.check()
    return kind


def _check_disk_machine(name: str, what: str) -> machines.Kind:
    """A command that needs the scratch disk runs on a QEMU machine only."""
    kind = _check_machine(name, install=False)
    if not kind.has_disk:
        raise HarnessError(f"{what} need a disk, and machine {kind.name} has none (no virtio)",
                           "use --machine qemu or qemu-pti")
    return kind


def cmd_boot(args: argparse.Namespace) -> int:
    # --dry-run builds and installs nothing: it prints what a run would do
    kind = _check_machine(args.machine, args.steps, install=not args.dry_run)
    if kind.emulator == machines.BOCHS and not args.steps:
        raise HarnessError(f"machine {kind.name} runs steps only (its console is not "
                           "a terminal)", "name the steps, e.g. ./xpfo boot --machine "
                           f"{kind.name} info")
    if not args.dry_run:
        ensure_kernel(args)
    req = guest.GuestRequest(steps=args.steps, cpus=args.cpus, mem_mb=args.mem,
                             params=_params(args), timeout=args.timeout, disk=kind.has_disk,
                             label="boot", machine=kind.name)
    m = guest.machine(req)
    if args.dry_run:
        if kind.emulator == machines.BOCHS:
            bochs.dry_run(m, bochs.Files(Path("xpfo-bochs")))
        else:
            printer.command(m.qemu_args(interactive=not args.steps))
        return 0
    if not args.steps:
        return qemu.interactive(m)
    r = guest.run(req, echo=True)
    verdict = judge.boot(r)
    for reason in verdict.reasons:
        printer.raw(f"FAIL: {reason}")
    return 0 if verdict.passed else 1


def attack_steps(cpus: int, disk: bool = True) -> List[str]:
    """The attack boot's steps; without a disk, none that needs one (the
    symlink step checks tmpfs and ramfs then, and ret2dir skips nothing:
    its page-cache variant is judged n/a)."""
    first, last = attacks.PGT_AUDIT_LABELS
    return ["info", attacks.pgt_audit_step(first), *(["disk"] if disk else []), "symlink",
            *attacks.lkdtm_steps(cpus, disk), attacks.RET2DIR_STEP, *judge.GLOBAL_STEPS, "vmstat",
            attacks.pgt_audit_step(last)]


def run_attacks(mode: str, cpus: int, timeout: float, kunit: bool = True,
                machine: str = machines.DEFAULT) -> dict:
    kind = machines.get(machine)
    cpus = kind.vcpus(cpus)
    params = modes.params(mode) + ["hugepages=4"]
    if kunit:
        # every suite the test kernel has: xpfo and pgtprot
        params += ["kunit.enable=1"]
    label = f"attacks-{mode}" + ("" if kind.name == machines.DEFAULT else f"-{kind.name}")
    # predict's faults of up to 2M each take minutes at Bochs's speed
    predict = attacks.predict_runs(mode) and kind.emulator == machines.QEMU
    steps = attack_steps(cpus, kind.has_disk) + ([attacks.PREDICT_STEP] if predict else [])
    req = guest.GuestRequest(steps=steps, cpus=cpus, mem_mb=1024,
                             params=params, timeout=timeout, disk=kind.has_disk,
                             label=label, machine=kind.name)
    r = guest.run(req)
    con = r.console
    j = judge.attack_run(r, mode, cpus, with_kunit=kunit, predict=predict)
    stray = judge.incidents(con, judge.attack_steps(cpus)).reasons
    info = next(iter(con.steps["info"].results), {}) if "info" in con.steps else {}
    return {
        "mode": mode, "cpus": cpus, "machine": kind.name, "outcome": r.outcome.value,
        "log": str(r.log), "info": info,
        "verdicts": [v.__dict__ for v in j.tests],
        "not_applicable": attacks.not_applicable(cpus, kind.has_disk),
        "stray_incidents": list(stray),
        "kunit": j.kunit,
        "kunit_pgtprot": j.kunit_pgtprot,
        "kunit_cases": [c.__dict__ for c in con.ktap
                        if c.suite in (judge.KUNIT_SUITE, judge.PGT_KUNIT_SUITE)],
        **j.verdict.to_dict(),
        "passed": j.verdict.passed,
    }


# the table's rows in the catalogue's order; others after them
_TEST_ORDER = ([a.name for a in attacks.LKDTM_ATTACKS + attacks.PGTPROT_ATTACKS]
               + [attacks.pgt_audit_test(label) for label in attacks.PGT_AUDIT_LABELS]
               + [attacks.IMAGE_TAIL, "ret2dir"]
               + [f"ret2dir[{v}]" for v in attacks.RET2DIR_VARIANTS] + ["ret2dir[oopses]"])


def print_attack_table(results: Sequence[dict]) -> None:
    """One column per run: a mode, and with other machines than the default
    one, the machine kind too."""
    kinds = {r.get("machine", machines.DEFAULT) for r in results}
    named = kinds != {machines.DEFAULT}

    def column(r: dict) -> str:
        label = modes.label(r["mode"])
        return f"{label}, {r.get('machine', machines.DEFAULT)}" if named else label

    printer.raw("")
    printer.raw("| test | " + " | ".join(column(r) for r in results) + " |")
    printer.raw("|---|" + "---|" * len(results))
    names: List[str] = []
    for r in results:
        for n in [v["test"] for v in r["verdicts"]] + list(r.get("not_applicable", {})):
            if n not in names:
                names.append(n)
    first = {n: i for i, n in enumerate(names)}
    names.sort(key=lambda n: (_TEST_ORDER.index(n) if n in _TEST_ORDER else len(_TEST_ORDER),
                              first[n]))
    for n in names:
        cells = []
        for r in results:
            v = next((v for v in r["verdicts"] if v["test"] == n), None)
            na = r.get("not_applicable", {}).get(n)
            cells.append(na if v is None and na else "-" if v is None else
                         f"{'PASS' if v['passed'] else 'FAIL'}: {v['detail']}")
        printer.raw(f"| {n} | " + " | ".join(cells) + " |")
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


def cmd_test(args: argparse.Namespace) -> int:
    for name in args.machines:
        _check_machine(name)
    ensure_kernel(args)
    results = [run_attacks(mode, args.cpus, args.timeout, machine=name)
               for name in args.machines for mode in args.modes]
    print_attack_table(results)
    ok = all(r["passed"] for r in results)
    _write_json(LAYOUT.out / "test-results.json", {"results": results, "passed": ok,
                                                   "machines": list(args.machines)})
    printer.info("test", "all passed" if ok else "FAILED")
    return 0 if ok else 1


def run_stress(mode: str, cpus: int, seconds: int, mem_mb: int,
               machine: str = machines.DEFAULT) -> dict:
    # Memory offline/online first, on a fresh system, in a ZONE_MOVABLE
    # (movablecore=) with at least one whole block: a block the kernel has
    # put unmovable pages in, or the top block with its e820 hole, refuses.
    # nokaslr: a randomised kernel image can straddle the two middle blocks
    # (seen at 512 MiB: 0xf800000-0x107fffff), and then none goes offline.
    req = guest.GuestRequest(steps=["info", "disk", "hotplug", "audit:hotplug",
                                    f"stress:{seconds}", "audit:stress"], cpus=cpus,
                             mem_mb=mem_mb,
                             params=modes.params(mode) + ["movablecore=50%", "nokaslr"],
                             timeout=seconds * 3 + 420, disk=True, machine=machine,
                             label=f"stress-{mode}"
                             + ("" if machine == machines.DEFAULT else f"-{machine}"))
    r = guest.run(req)
    con = r.console
    step = con.steps.get(f"stress:{seconds}")
    results = step.results if step else []
    verdict = judge.stress_run(r, f"stress:{seconds}")
    return {
        "mode": mode, "cpus": cpus, "seconds": seconds, "mem_mb": mem_mb, "machine": machine,
        "outcome": r.outcome.value, "log": str(r.log), "workers": results,
        "counters": next((x.get("counters") for x in results if "counters" in x), {}),
        "audits": judge.audits(con),
        "hotplug": judge.hotplug(con),
        "incidents": list(judge.incidents(con).reasons),
        **verdict.to_dict(),
        "passed": verdict.passed,
    }


def cmd_stress(args: argparse.Namespace) -> int:
    _check_disk_machine(args.machine, "the stress step and its memory hotplug")
    ensure_kernel(args)
    res = run_stress(args.mode, args.cpus, args.seconds, args.mem, args.machine)
    for w in res["workers"]:
        if "worker" in w:
            printer.raw(f"  {w['worker']:10} {w.get('status', '?'):5} "
                        f"iterations={w.get('iterations', '-')}")
    for reason in res["reasons"]:
        printer.raw(f"FAIL: {reason}")
    printer.raw(f"counters: {json.dumps(res['counters'], sort_keys=True)}")
    res["command"] = (f"./xpfo stress --mode {args.mode} --cpus {args.cpus} "
                      f"--seconds {args.seconds} --mem {args.mem}"
                      + ("" if args.machine == machines.DEFAULT
                         else f" --machine {args.machine}"))
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    _write_json(LAYOUT.out / f"stress-{args.mode}.json", res)
    printer.info("stress", f"{'passed' if res['passed'] else 'FAILED'}: {res['outcome']}, "
                 f"log {res['log']}")
    return 0 if res["passed"] else 1


def _series_head() -> str:
    """The repository commit that holds kernel/patches (the kernel tree's
    own commits are re-made by git am in every clone)."""
    r = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=LAYOUT.root,
                       capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def series_commit() -> str:
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=LAYOUT.src, capture_output=True,
                       text=True)
    return r.stdout.strip() or "unknown"


def run_bench(modes: Sequence[str], cpus: Sequence[int], rounds: int, quick: bool,
              outdir: Path, command: str, vanilla: Optional[Path] = None,
              tcg_threads: str = "multi", kernel: Optional[Path] = None,
              workloads: Optional[Sequence[str]] = None,
              icount: bool = False, machine: str = machines.DEFAULT) -> bench.BenchData:
    req = bench.BenchRequest(modes=modes, cpus=cpus, rounds=rounds, icount=icount,
                             machine=machine,
                             workloads=bench.select(bench.QUICK if quick else bench.FULL,
                                                    workloads),
                             build_files=QUICK_BUILD_FILES if quick else buildload.DEFAULT_FILES,
                             vanilla_kernel=vanilla, tcg_threads=tcg_threads)
    data = bench.run(req, meta={"command": command, "series_commit": series_commit(),
                                "kernel": "6.12 + kernel/patches", "quick": quick,
                                "machine": machine,
                                "kernel_image": str(kernel or LAYOUT.bzimage)},
                     kernel=kernel)
    _write_bench(data, outdir, command)
    return data


def _bench_command(args: argparse.Namespace) -> str:
    parts = ["./xpfo bench", "--modes", *args.modes, "--cpus", *map(str, args.cpus),
             "--rounds", str(args.rounds)]
    if args.quick:
        parts.append("--quick")
    if getattr(args, "workloads", None):
        parts += ["--workloads", *args.workloads]
    if getattr(args, "kernel", None):
        parts += ["--kernel", args.kernel]
    if getattr(args, "icount", False):
        parts.append("--icount")
    if getattr(args, "machine", machines.DEFAULT) != machines.DEFAULT:
        parts += ["--machine", args.machine]
    return " ".join(parts)


def _write_bench(data: bench.BenchData, outdir: Path, command: str) -> None:
    tmp = outdir.with_name(outdir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _write_json(tmp / "results.json", {"meta": data.meta, "samples": data.samples,
                                       "failures": data.failures, "windows": data.windows})
    text = report.tables(data)
    (tmp / "results.md").write_text(f"Command: `{command}`\n\n{text}\n")
    report.plots(data, tmp)
    shutil.rmtree(outdir, ignore_errors=True)
    tmp.rename(outdir)
    printer.raw(text)
    printer.info("bench", f"results, tables and plots in {outdir}")


def _check_bench_machine(args: argparse.Namespace) -> None:
    """Refuse what the machine kind cannot run, before anything boots."""
    kind = machines.get(args.machine)
    if kind.emulator == machines.QEMU:
        return
    if args.icount:
        raise HarnessError(f"--icount is QEMU's; machine {kind.name} is {kind.emulator}",
                           "leave --icount out: Bochs's clock already runs at its `ips` "
                           "guest instructions per second")
    if bench.VANILLA in args.modes:
        raise HarnessError(f"the vanilla kernel is benchmarked on QEMU machines only, "
                           f"not on {kind.name}")
    if kind.cpus is not None and args.cpus != [kind.cpus]:
        raise HarnessError(f"machine {kind.name} has {kind.cpus} CPU"
                           f"{'s' if kind.cpus > 1 else ''}, not "
                           f"{' '.join(map(str, args.cpus))}",
                           f"give --cpus {kind.cpus}, or leave --cpus out")
    wls = bench.select(bench.QUICK if args.quick else bench.FULL, args.workloads)
    bad = sorted({n for w in wls if w.step.startswith("build") or ":disk_read" in w.step
                  for n in w.reports})
    if bad:
        raise HarnessError(f"machine {kind.name} has no disk (no virtio), and workload"
                           f"{'s' if len(bad) > 1 else ''} {', '.join(bad)} need"
                           f"{'' if len(bad) > 1 else 's'} one",
                           "choose others with --workloads (e.g. page_fault fork exec lseek)")


def cmd_bench(args: argparse.Namespace) -> int:
    if not args.cpus:
        fixed = machines.get(args.machine).cpus
        args.cpus = [fixed] if fixed else bench.default_cpus()
    if args.from_logs:
        # every mode the logs hold, pgtprot's included
        req = bench.BenchRequest(modes=(tuple(BENCH_MODES) + modes.PGT_RUN_MODES
                                        + modes.DMAP_RUN_MODES),
                                 cpus=args.cpus, rounds=args.rounds,
                                 workloads=bench.select(
                                     bench.QUICK if args.quick else bench.FULL,
                                     args.workloads))
        logs = [Path(p) for p in args.from_logs]
        missing = [str(p) for p in logs if not p.exists()]
        if missing:
            raise HarnessError(f"no such log: {missing[0]}")
        outdir = Path(args.out) if args.out else LAYOUT.out / "bench"
        # The run's own description (host, QEMU, series, date), when the
        # report being rebuilt is that run's.
        meta: Dict[str, object] = {}
        try:
            meta = json.loads((outdir / "results.json").read_text())["meta"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
        meta.update({"command": _bench_command(args), "from_logs": True})
        data = bench.from_logs(logs, req, meta)
        _write_bench(data, outdir, f"{_bench_command(args)}`; report rebuilt from its "
                     f"{len(logs)} guest logs with `./xpfo bench "
                     f"{'--quick ' if args.quick else ''}--from-logs LOG...")
        return 1 if data.failures else 0
    _check_bench_machine(args)
    kernel = None
    if args.kernel:
        # a given image: nothing is built (the initramfs is, when stale)
        kernel = Path(args.kernel).resolve()
        if not kernel.is_file():
            raise HarnessError(f"no such kernel image: {kernel}")
        initramfs.build(LAYOUT)
    else:
        ensure_kernel(args)
    vanilla = ensure_vanilla(args) if bench.VANILLA in args.modes else None
    outdir = Path(args.out) if args.out else LAYOUT.out / "bench"
    data = run_bench(args.modes, args.cpus, args.rounds, args.quick, outdir,
                     _bench_command(args), vanilla, kernel=kernel, workloads=args.workloads,
                     icount=args.icount, machine=args.machine)
    return 1 if data.failures else 0


def cmd_selftests(args: argparse.Namespace) -> int:
    """Upstream's mm selftests in each mode, compared with xpfo=off."""
    if args.from_logs:
        logs = [Path(p) for p in args.from_logs]
        missing = [str(p) for p in logs if not p.is_file()]
        if missing:
            raise HarnessError(f"no such log: {missing[0]}")
        data = selftests.summarize(selftests.from_logs(logs), {
            "command": "./xpfo selftests --from-logs " + " ".join(map(str, logs))}, {})
        _write_json(LAYOUT.out / "selftests.json", data)
        return 0 if data["passed"] else 1
    _check_disk_machine(args.machine, "the mm selftests")
    if args.kernel:
        image = Path(args.kernel).resolve()
        if not image.is_file():
            raise HarnessError(f"no such kernel image: {args.kernel}")
        kernel: Optional[Path] = image
        commit = "unknown (--kernel)"
    else:
        ensure_kernel(args)
        kernel, commit = None, series_commit()
    command = ("./xpfo selftests --modes " + " ".join(args.modes) + f" --cpus {args.cpus}"
               + (f" --parallel {args.parallel}" if args.parallel > 1 else "")
               + ("" if args.machine == machines.DEFAULT else f" --machine {args.machine}")
               + (" --programs " + " ".join(args.programs) if args.programs else ""))
    data = selftests.run_suite(args.modes, args.cpus, kernel, jobs=args.jobs,
                               parallel=args.parallel, machine=args.machine,
                               only=args.programs or (), meta={
        "command": command + (f" --kernel {args.kernel}" if args.kernel else ""),
        "series_commit": commit, "kernel_image": str(kernel or LAYOUT.bzimage)})
    _write_json(LAYOUT.out / "selftests.json", data)
    printer.info("selftests", f"{'no difference from off' if data['passed'] else 'FAILED'}; "
                 f"results in {LAYOUT.out / 'selftests.json'}")
    return 0 if data["passed"] else 1


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job: build, attack demo on both sides, a quick benchmark."""
    ensure_kernel(args)
    printer.info("demo", "attack tests: the same kernel booted with xpfo=" + ", ".join(MODES))
    results = [run_attacks(mode, 2, 900) for mode in MODES]
    print_attack_table(results)
    printer.info("demo", "quick side-by-side benchmark of the modes")
    data = run_bench(list(MODES), [2], 2, True, LAYOUT.out / "bench-quick",
                     "./xpfo bench --quick --modes " + " ".join(MODES) + " --cpus 2 --rounds 2")
    verdict = judge.worst([judge.Verdict(judge.Status(r["status"]), tuple(r["reasons"]))
                           for r in results] + [judge.bench_failures(data.failures)])
    for reason in verdict.reasons:
        printer.raw(f"FAIL: {reason}")
    printer.info("demo", "done" if verdict.passed else f"FAILED ({verdict.status.value}): "
                 "the attack tests, KUnit or the benchmark did not behave as expected")
    return 0 if verdict.passed else 1


def cmd_series_check(args: argparse.Namespace) -> int:
    deps.ensure(quiet=True)
    results = series.check(LAYOUT, jobs=args.jobs, build_each=not args.no_build,
                           first=args.first, last=args.last, configs=args.configs,
                           objects=args.objects)
    text = series.table(results)
    printer.raw(text)
    if args.write:
        path = LAYOUT.root / "docs" / "SERIES.md"
        path.parent.mkdir(exist_ok=True)
        _, shipped = _split_series_doc(path)
        how = ("`make prepare`, then with `-Werror` the objects of the patch's own C "
               "files that the test kernel builds and the files that carry XPFO and "
               "pgtprot hooks (`harness/series.py`)" if args.objects else
               "the whole bzImage over the previous patch's objects, with ccache: build "
               "times are incremental, not clean builds")
        cmd = "./xpfo series-check" + (" --objects" if args.objects else "") + " --write"
        path.write_text(f"# Series check\n\nCommand: `{cmd}`, "
                        f"{time.strftime('%Y-%m-%d', time.gmtime())}, repository commit "
                        f"`{_series_head()}`.\n\n"
                        "Each patch is checked out in `build/series-src` and built in the "
                        "test kernel's configuration (XPFO and pgtprot on) and in the same "
                        f"with both not set (off): {how}.\n\n"
                        f"{text}\n{shipped}")
    ok = all(r.build_ok and r.errors == 0 for r in results)
    return 0 if ok else 1


SHIPPED_HEADING = "## Shipped configurations"


def _split_series_doc(path: Path) -> "tuple[str, str]":
    """docs/SERIES.md: the per-patch part and the shipped-configurations part."""
    try:
        text = path.read_text()
    except OSError:
        return "", ""
    i = text.find(SHIPPED_HEADING)
    return (text, "") if i < 0 else (text[:i], "\n" + text[i:])


def cmd_configs(args: argparse.Namespace) -> int:
    unknown = [n for n in args.names if n not in {c.name for c in configs.CONFIGS}]
    if unknown:
        raise HarnessError(f"unknown configuration {unknown[0]!r}",
                           "known: " + ", ".join(c.name for c in configs.CONFIGS))
    deps.ensure(quiet=True)
    source.prepare(LAYOUT)
    results = []
    for cfg in configs.by_name(args.names):
        printer.info("configs", f"{cfg.name}: {cfg.what} (a clean build in build/cfg-{cfg.name})")
        r = configs.build_one(cfg, LAYOUT, jobs=args.jobs)
        printer.info("configs", f"{cfg.name}: {'builds' if r.ok else 'FAILS'} "
                     f"({printer.fmt_elapsed(r.elapsed)})")
        if not r.ok:
            printer.raw(r.message)
        results.append(r)
    text = configs.table(results)
    printer.raw(text)
    if args.write:
        path = LAYOUT.root / "docs" / "SERIES.md"
        head, _ = _split_series_doc(path)
        path.write_text(head.rstrip("\n") + f"\n\n{SHIPPED_HEADING}\n\n"
                        f"Command: `./xpfo configs --write`, "
                        f"{time.strftime('%Y-%m-%d', time.gmtime())}. Each is a build from "
                        "scratch (with ccache) of `x86_64_defconfig` + `kvm_guest.config` + "
                        "the options named, at the series HEAD shown; not run in CI.\n\n"
                        f"{text}\n")
    return 0 if all(r.ok for r in results) else 1


def cmd_parse(args: argparse.Namespace) -> int:
    try:
        text = Path(args.log).read_text(errors="replace")
    except OSError as e:
        raise HarnessError(f"cannot read {args.log}: {e}") from None
    con = console.parse(text.splitlines())
    for name in con.order:
        st = con.steps[name]
        state = f"exit {st.exit_status}" if st.ended else "did not finish"
        printer.raw(f"step {name}: {state}, {len(st.results)} results")
        for res in st.results:
            printer.raw(f"  RESULT {json.dumps(res, sort_keys=True)}")
    for inc in con.incidents:
        printer.raw(f"incident {inc.kind} during {inc.step or 'boot'}: {inc.first_line}")
    for case in con.ktap:
        printer.raw(f"ktap {case.suite}.{case.name}: {case.status}")
    plan = f" ({con.reported} of {con.planned} steps)" if con.planned is not None else ""
    printer.raw(f"runner finished: {'yes' if con.runner_finished() else 'no'}{plan}")
    if args.mode:
        kind = machines.get(args.machine)
        for v in attacks.judge_all(con, args.mode, args.cpus, disk=kind.has_disk,
                                   pks=kind.has_pks):
            printer.raw(f"{'PASS' if v.passed else 'FAIL'} {v.test} ({v.mode}): {v.detail}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    deps.ensure(quiet=True)  # the unit tests use cpio, tar/xz, git and perl too
    cmd = [sys.executable, "-m", "pytest", "-v", "-rs", str(LAYOUT.root / "tests"),
           *args.pytest_args]
    printer.command(cmd)
    return subprocess.call(cmd, cwd=LAYOUT.root)


_machine_help = ("machine kind: " + "; ".join(f"{k.name}: {k.description}"
                                              for k in machines.KINDS.values())
                 + " (a Bochs machine's CPU count is fixed: --cpus does not change it)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xpfo", description="Build, boot, test and measure "
                                "the xpfo kernel (Linux 6.12 + the series in kernel/patches).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, fn, help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        sp.set_defaults(func=fn)
        return sp

    def positive(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1: {n}")
        return n

    def guest_opts(sp: argparse.ArgumentParser, cpus: int = 2) -> None:
        sp.add_argument("--cpus", type=positive, default=cpus, help="vCPUs (-smp)")
        sp.add_argument("--mem", type=positive, default=1024, help="guest memory, MiB")
        sp.add_argument("--timeout", type=positive, default=600, help="guest deadline, seconds")
        sp.add_argument("--jobs", type=positive, default=None, help="make -j")

    add("setup", cmd_setup, "install the Debian packages the project needs")
    sp = add("source", cmd_source, "create build/src: a git tree of the base + the series")
    sp.add_argument("--force", action="store_true", help="drop local commits in build/src")
    add("export", cmd_export, "write build/src's commits back to kernel/patches")
    sp = add("config", cmd_config, "generate and verify the kernel .config")
    sp.add_argument("--jobs", type=positive, default=None)
    sp = add("build", cmd_build, "build the kernel and the initramfs")
    sp.add_argument("--jobs", type=positive, default=None, help="make -j")
    sp.add_argument("--vanilla", action="store_true",
                    help="build the base without the series (benchmark reference)")
    sp = add("boot", cmd_boot, "boot the kernel; a shell on the console, or run steps")
    guest_opts(sp)
    sp.add_argument("--mode", choices=ALL_MODES,
                    help="xpfo= (and pgtprot=) boot parameters: " + ", ".join(ALL_MODES))
    sp.add_argument("--param", action="append", help="extra kernel parameter (repeatable)")
    sp.add_argument("--machine", default=machines.DEFAULT, metavar="KIND",
                    help=_machine_help)
    sp.add_argument("--dry-run", action="store_true",
                    help="print the emulator command (and for Bochs the bochsrc) only")
    sp.add_argument("steps", nargs="*", help="guest steps, e.g. info lkdtm:XPFO_READ_USER")
    sp = add("test", cmd_test, "attack tests (both sides), KUnit, in every mode")
    guest_opts(sp)
    sp.add_argument("--modes", nargs="+", choices=ALL_MODES, default=list(TEST_MODES))
    sp.add_argument("--machines", "--machine", nargs="+", default=[machines.DEFAULT],
                    metavar="KIND", help=_machine_help + "; each mode runs on each")
    sp = add("stress", cmd_stress, "stress the kernel in one mode (fork, THP, reclaim, ...)")
    guest_opts(sp, cpus=4)
    sp.add_argument("--mode", choices=ALL_MODES, default="sync")
    sp.add_argument("--seconds", type=positive, default=300)
    sp.add_argument("--machine", default=machines.DEFAULT, metavar="KIND",
                    help="a QEMU machine kind (qemu, qemu-pti): the step needs the disk")
    sp = add("bench", cmd_bench, "side-by-side benchmark of the modes, tables and plots")
    sp.add_argument("--modes", nargs="+",
                    choices=BENCH_MODES + modes.PGT_RUN_MODES + modes.DMAP_RUN_MODES,
                    default=list(BENCH_MODES),
                    help="'vanilla' is the same configuration built without the series; "
                    "the pgt- modes add pgtprot= (pgt-eager: a protection-key switch pair "
                    "per page-table store, to compare with pgt-batched's pair per section); "
                    "+nonglobal adds xpfo_dmap=nonglobal (a non-global direct map)")
    sp.add_argument("--cpus", nargs="+", type=positive, default=None,
                    help="vCPU counts (default: 1 2 4 8 up to the host's cores; more are "
                    "run when asked, marked oversubscribed and not judged)")
    sp.add_argument("--rounds", type=positive, default=3)
    sp.add_argument("--quick", action="store_true", help="small sizes")
    sp.add_argument("--workloads", nargs="+", metavar="NAME",
                    help="only the workloads that report these (e.g. build_sys fork "
                    "munmap_pte); default: all")
    sp.add_argument("--icount", action="store_true",
                    help="QEMU -icount shift=0,sleep=off: every timing is a count of guest "
                         "instructions, repeatable for CPU-bound workloads")
    sp.add_argument("--out", help="output directory (default out/bench)")
    sp.add_argument("--jobs", type=positive, default=None)
    sp.add_argument("--kernel", metavar="BZIMAGE",
                    help="boot this image of the series' kernel; builds nothing")
    sp.add_argument("--machine", default=machines.DEFAULT, metavar="KIND",
                    help="machine kind (" + ", ".join(machines.KINDS) + "); a Bochs kind "
                    "has no disk (workloads without one only) and times in guest "
                    "instructions at its ips")
    sp.add_argument("--from-logs", nargs="+", metavar="LOG",
                    help="rebuild the report from saved guest logs (bench-MODE-Ncpu-rR.log)")
    sp = add("selftests", cmd_selftests,
             "upstream's mm selftests in each mode, compared with xpfo=off")
    sp.add_argument("--modes", nargs="+", choices=ALL_MODES, default=list(MODES))
    sp.add_argument("--cpus", type=positive, default=1, help="vCPUs (-smp)")
    sp.add_argument("--kernel", help="boot this bzImage as it is (no ensure_kernel)")
    sp.add_argument("--parallel", type=positive, default=1,
                    help="guests at a time, one mode each (at most host cores / --cpus)")
    sp.add_argument("--machine", default=machines.DEFAULT, metavar="KIND",
                    help="a QEMU machine kind (qemu, qemu-pti): the programs live on the disk")
    sp.add_argument("--from-logs", nargs="+", metavar="LOG",
                    help="rebuild the table from saved guest logs (...-selftests-MODE.log)")
    sp.add_argument("--programs", nargs="+", metavar="ID", default=None,
                    help="run only these programs (ids as in the results table)")
    sp.add_argument("--jobs", type=positive, default=None, help="make -j")
    sp = add("demo", cmd_demo, "the main job: build, attack demo, quick benchmark")
    sp.add_argument("--jobs", type=positive, default=None)
    sp = add("series-check", cmd_series_check,
             "build the tree at every patch of the series and run checkpatch --strict")
    sp.add_argument("--jobs", type=positive, default=None)
    sp.add_argument("--no-build", action="store_true", help="checkpatch only")
    sp.add_argument("--from", dest="first", type=positive, default=1, metavar="N",
                    help="build from patch N on (checkpatch still runs on every patch)")
    sp.add_argument("--to", dest="last", type=positive, default=None, metavar="N",
                    help="build up to patch N (default: the last)")
    sp.add_argument("--configs", nargs="+", choices=series.CONFIGS, default=list(series.CONFIGS),
                    help="XPFO and pgtprot on (the test kernel's configuration), off, or both")
    sp.add_argument("--objects", action="store_true",
                    help="build the patch's own objects and the hook carriers with -Werror "
                         "instead of the whole kernel (needs ./xpfo build first)")
    sp.add_argument("--write", action="store_true", help="write docs/SERIES.md")
    sp = add("configs", cmd_configs,
             "build the series in shipped configurations (MAXSMP; modules with LKDTM=m; "
             "the touched files the test kernel does not build)")
    sp.add_argument("names", nargs="*", metavar="NAME",
                    help=", ".join(c.name for c in configs.CONFIGS) + " (default: all)")
    sp.add_argument("--jobs", type=positive, default=None)
    sp.add_argument("--write", action="store_true", help="record the table in docs/SERIES.md")
    sp = add("parse", cmd_parse, "re-parse a saved console log")
    sp.add_argument("log")
    sp.add_argument("--mode", choices=ALL_MODES,
                    help="also judge the attack tests for this mode")
    sp.add_argument("--cpus", type=positive, default=2)
    sp.add_argument("--machine", default=machines.DEFAULT, metavar="KIND",
                    help="the machine the log comes from (Bochs has no disk)")
    sp = add("check", cmd_check, "run the project's test suite (pytest)")
    sp.add_argument("pytest_args", nargs=argparse.REMAINDER)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check"]:
        # everything after 'check' belongs to pytest, options included
        args = argparse.Namespace(func=cmd_check, pytest_args=argv[1:])
    else:
        args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except HarnessError as e:
        printer.error(str(e))
        return 2
    except subprocess.CalledProcessError as e:
        printer.error(str(errors.from_called_process(e)))
        return 2
    except KeyboardInterrupt:
        printer.error("interrupted")
        return 130
    except OSError as e:
        if e.errno == 28:
            printer.error(f"disk full: {e}. Free space (df -h), then run the command again; "
                          "outputs of the failed step were not marked good")
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
