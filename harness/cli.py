"""Command line: parse the arguments and dispatch each subcommand to the
module that does its stage (build, guest, attack_runs, stress, bench,
profile, selftests, series, serieslint, configs, demo); nothing here runs a
stage itself."""

import argparse
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from . import (attack_runs, author, bench, build, configs, console, demo, deps, errors, guest,
               machines, modes, printer, profile, selftests, series, serieslint, source,
               stress)
from .errors import HarnessError
from .paths import LAYOUT


def cmd_setup(args: argparse.Namespace) -> int:
    deps.ensure()
    return 0


def cmd_source(args: argparse.Namespace) -> int:
    deps.ensure(quiet=True)
    src = source.prepare(LAYOUT, force=args.force)
    printer.info("source", f"kernel tree ready: {src} (edit, commit, then ./xpfo export)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    # checked before anything is written
    who = author.parse(args.author) if args.author is not None else None
    source.export(LAYOUT, author=who)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    path = build.check_config(args.jobs)
    printer.info("config", f"{path}: every fragment option took effect")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    if args.vanilla:
        kernel = build.ensure_vanilla(args.jobs, force=True)
        printer.info("build", f"vanilla kernel (no series) {kernel}")
        return 0
    build.ensure_kernel(args.jobs, force_build=True)
    printer.info("build", f"kernel {LAYOUT.bzimage}, initramfs {LAYOUT.initramfs}")
    return 0


def _params(args: argparse.Namespace) -> List[str]:
    params = list(args.param or [])
    if getattr(args, "mode", None):
        params[:0] = modes.params(args.mode)
    return params


def cmd_boot(args: argparse.Namespace) -> int:
    # --dry-run builds and installs nothing: it prints what a run would do
    kind = guest.check_boot(args.machine, args.steps, dry_run=args.dry_run)
    if not args.dry_run:
        build.ensure_kernel(args.jobs)
    req = guest.GuestRequest(steps=args.steps, cpus=args.cpus, mem_mb=args.mem,
                             params=_params(args), timeout=args.timeout, disk=kind.has_disk,
                             label="boot", machine=kind.name)
    return guest.boot(req, dry_run=args.dry_run)


def cmd_test(args: argparse.Namespace) -> int:
    for name in args.machines:
        guest.check_machine(name)
    build.ensure_kernel(args.jobs)
    ok = attack_runs.run_suite(args.modes, args.machines, args.cpus, args.timeout)
    return 0 if ok else 1


def cmd_stress(args: argparse.Namespace) -> int:
    guest.check_disk_machine(args.machine, "the stress step and its memory hotplug")
    build.ensure_kernel(args.jobs)
    res = stress.run_and_record(args.mode, args.cpus, args.seconds, args.mem, args.machine,
                                extra=args.param or ())
    return 0 if res["passed"] else 1


def cmd_bench(args: argparse.Namespace) -> int:
    cpus = args.cpus or bench.default_cpus_on(args.machine)
    command = bench.command_line(args.modes, cpus, args.rounds, args.quick, args.workloads,
                                 args.kernel, args.icount, args.machine)
    outdir = Path(args.out) if args.out else LAYOUT.out / "bench"
    if args.from_logs:
        data = bench.rebuild(args.from_logs, outdir, cpus, args.rounds, args.quick,
                             args.workloads, command)
        return 1 if data.failures else 0
    bench.check_machine(args.machine, args.modes, cpus, args.quick, args.workloads,
                        args.icount)
    kernel = build.given_image(args.kernel) if args.kernel else None
    if kernel is None:
        build.ensure_kernel(args.jobs)
    vanilla = build.ensure_vanilla(args.jobs) if bench.VANILLA in args.modes else None
    data = bench.run_and_report(args.modes, cpus, args.rounds, args.quick, outdir, command,
                                vanilla, kernel=kernel, workloads=args.workloads,
                                icount=args.icount, machine=args.machine)
    return 1 if data.failures else 0


def cmd_profile(args: argparse.Namespace) -> int:
    """Guest instructions per kernel function of a workload, mode against mode."""
    smap = profile.system_map(args.kernel, args.system_map)
    kernel = build.given_image(args.kernel) if args.kernel else None
    if kernel is None:
        build.ensure_kernel(args.jobs)
    req = profile.ProfileRequest(modes=args.modes, workload=args.workload, cpus=args.cpus,
                                 kernel=kernel, system_map=smap, top=args.top)
    command = profile.command_line(req, args.kernel, args.system_map)
    outdir = Path(args.out) if args.out else LAYOUT.out / "profile"
    profile.run_and_report(req, outdir, command)
    return 0


def cmd_selftests(args: argparse.Namespace) -> int:
    """Upstream's mm selftests in each mode, compared with xpfo=off."""
    if args.from_logs:
        return 0 if selftests.rebuild(args.from_logs)["passed"] else 1
    guest.check_disk_machine(args.machine, "the mm selftests")
    if not args.kernel:
        build.ensure_kernel(args.jobs)
    data = selftests.run_and_record(args.modes, args.cpus, args.kernel, jobs=args.jobs,
                                    parallel=args.parallel, machine=args.machine,
                                    programs=args.programs or ())
    return 0 if data["passed"] else 1


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job: build, attack demo on both sides, a quick benchmark."""
    return demo.run(args.jobs)


def cmd_series_check(args: argparse.Namespace) -> int:
    ok = series.run_check(LAYOUT, jobs=args.jobs, build_each=not args.no_build,
                          first=args.first, last=args.last, configs=args.configs,
                          objects=args.objects, write=args.write, boot=args.boot)
    return 0 if ok else 1


def cmd_series_lint(args: argparse.Namespace) -> int:
    findings = serieslint.check(LAYOUT.root)
    new, gone = serieslint.compare(findings, serieslint.read_known())
    printer.raw(serieslint.table(findings))
    known = "harness/serieslint_known.txt"
    for key in gone:
        printer.info("series-lint", f"no longer found, delete its line from {known}: {key}")
    if new:
        printer.raw(f"\nnot in {known}:\n" + serieslint.table(new))
    printer.info("series-lint", f"{len(findings)} findings, {len(new)} not in {known}")
    return 1 if new or gone else 0


def cmd_configs(args: argparse.Namespace) -> int:
    return 0 if configs.run(args.names, LAYOUT, jobs=args.jobs, write=args.write) else 1


def cmd_parse(args: argparse.Namespace) -> int:
    con = console.read(args.log)
    for line in console.describe(con):
        printer.raw(line)
    if args.mode:
        for line in attack_runs.judge_log(con, args.mode, args.cpus, args.machine):
            printer.raw(line)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    deps.ensure(quiet=True)  # the unit tests use cpio, tar/xz, git and perl too
    # the Bochs machines' tests, the host-side ones with a fake Bochs included,
    # run under a private Xvfb: install them before pytest, not at a first boot
    deps.ensure(quiet=True, packages=deps.BOCHS_PACKAGES)
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
    sp = add("export", cmd_export, "write build/src's commits back to kernel/patches")
    sp.add_argument("--author", metavar="IDENTITY",
                    help="\"Name <user@host>\": the From: and Signed-off-by: of every patch "
                         "and cover letter in place of the placeholder (default: kernel/PARTS' "
                         f"author: line, else the placeholder {author.PLACEHOLDER})")
    sp = add("config", cmd_config, "generate and verify the kernel .config")
    sp.add_argument("--jobs", type=positive, default=None)
    sp = add("build", cmd_build, "build the kernel and the initramfs")
    sp.add_argument("--jobs", type=positive, default=None, help="make -j")
    sp.add_argument("--vanilla", action="store_true",
                    help="build the base without the series (benchmark reference)")
    sp = add("boot", cmd_boot, "boot the kernel; a shell on the console, or run steps")
    guest_opts(sp)
    sp.add_argument("--mode", type=modes.canonical, choices=modes.ALL_MODES,
                    help="xpfo= (and pgtprot=) boot parameters: " + ", ".join(modes.ALL_MODES))
    sp.add_argument("--param", action="append", help="extra kernel parameter (repeatable)")
    sp.add_argument("--machine", default=machines.DEFAULT, metavar="KIND",
                    help=_machine_help)
    sp.add_argument("--dry-run", action="store_true",
                    help="print the emulator command (and for Bochs the bochsrc) only")
    sp.add_argument("steps", nargs="*", help="guest steps, e.g. info lkdtm:XPFO_READ_USER")
    sp = add("test", cmd_test, "attack tests (both sides), KUnit, in every mode")
    guest_opts(sp)
    sp.add_argument("--modes", nargs="+", type=modes.canonical, choices=modes.ALL_MODES,
                    default=list(attack_runs.TEST_MODES))
    sp.add_argument("--machines", "--machine", nargs="+", default=[machines.DEFAULT],
                    metavar="KIND", help=_machine_help + "; each mode runs on each")
    sp = add("stress", cmd_stress, "stress the kernel in one mode (fork, THP, reclaim, ...)")
    guest_opts(sp, cpus=4)
    sp.add_argument("--mode", type=modes.canonical, choices=modes.ALL_MODES, default="sync")
    sp.add_argument("--seconds", type=positive, default=300)
    sp.add_argument("--machine", default=machines.DEFAULT, metavar="KIND",
                    help="a QEMU machine kind (qemu, qemu-pti): the step needs the disk")
    sp.add_argument("--param", action="append",
                    help="extra kernel parameter (repeatable), e.g. page_poison=1")
    sp = add("bench", cmd_bench, "side-by-side benchmark of the modes, tables and plots")
    sp.add_argument("--modes", nargs="+",
                    type=modes.canonical, choices=bench.ALL_MODES,
                    default=list(bench.DEFAULT_MODES),
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
    sp = add("profile", cmd_profile,
             "guest instructions per kernel function of a bench workload, mode against "
             "mode (QEMU -icount and a TCG plugin; full sizes minus quick ones)")
    sp.add_argument("--modes", nargs="+", choices=profile.MODES,
                    default=list(profile.DEFAULT_MODES), metavar="MODE",
                    help=", ".join(profile.MODES) + "; differences are against the first "
                    "(default: off strict)")
    sp.add_argument("--workload", choices=profile.WORKLOADS, default=profile.DEFAULT_WORKLOAD,
                    metavar="NAME", help="a bench workload with a size: "
                    + ", ".join(profile.WORKLOADS) + " (default: page_fault)")
    sp.add_argument("--cpus", type=positive, default=1, help="vCPUs (-smp)")
    sp.add_argument("--kernel", metavar="BZIMAGE",
                    help="boot this image of the series' kernel; builds nothing")
    sp.add_argument("--system-map", metavar="FILE",
                    help="the kernel's System.map (default: build/obj's, or the one beside "
                    "--kernel's image or at the top of its build tree)")
    sp.add_argument("--top", type=positive, default=profile.ProfileRequest.top, metavar="N",
                    help="rows of the table (default %(default)s)")
    sp.add_argument("--out", help="output directory (default out/profile)")
    sp.add_argument("--jobs", type=positive, default=None)
    sp = add("selftests", cmd_selftests,
             "upstream's mm selftests in each mode, compared with xpfo=off")
    sp.add_argument("--modes", nargs="+", type=modes.canonical, choices=modes.ALL_MODES,
                    default=list(modes.XPFO_MODES))
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
    sp = add("demo", cmd_demo, "the main job: build, attack demo (every XPFO mode and the "
             "recommended xpfo=strict pgtprot=batched), quick benchmark")
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
    sp.add_argument("--boot", action="store_true",
                    help="build the on configuration's whole kernel at each patch and, where "
                         "it has XPFO (pgtprot), run the attack boot in strict (and "
                         "strict+pgt-batched); with --write, into its own section of "
                         "docs/SERIES.md (21 minutes for v4's XPFO 26-29 on 2 cores: a "
                         "whole-kernel build where a patch changes widely included headers, "
                         "about 45 s a boot)")
    sp.add_argument("--write", action="store_true", help="write docs/SERIES.md")
    add("series-lint", cmd_series_lint,
        "mechanical checks of the patch files: a patch that rewrites an earlier one's "
        "lines, subject form and length, Fixes: tags (harness/serieslint.py)")
    sp = add("configs", cmd_configs,
             "build the series in shipped configurations (MAXSMP; modules with LKDTM=m; "
             "the touched files the test kernel does not build)")
    sp.add_argument("names", nargs="*", metavar="NAME",
                    help=", ".join(c.name for c in configs.CONFIGS) + " (default: all)")
    sp.add_argument("--jobs", type=positive, default=None)
    sp.add_argument("--write", action="store_true", help="record the table in docs/SERIES.md")
    sp = add("parse", cmd_parse, "re-parse a saved console log")
    sp.add_argument("log")
    sp.add_argument("--mode", type=modes.canonical, choices=modes.ALL_MODES,
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
