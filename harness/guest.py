"""Boot the built kernel with a list of guest steps and collect the console."""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence

from . import attacks, bochs, initramfs, judge, machines, printer, qemu
from .errors import HarnessError
from .paths import LAYOUT, Layout


@dataclass(frozen=True)
class GuestRequest:
    steps: Sequence[str]
    cpus: int = 2
    mem_mb: int = 1024
    params: Sequence[str] = ()
    timeout: float = 300.0
    disk: bool = False          # the scratch disk, /dev/vda
    extra_disks: Sequence[Path] = ()
    label: str = "run"
    kernel: Optional[Path] = None   # default: the kernel built from the series
    tcg_threads: str = "single"     # see qemu.Machine
    icount: bool = False            # see qemu.Machine
    machine: str = machines.DEFAULT  # the machine kind (machines.py)
    plugins: Sequence[str] = ()     # QEMU TCG plugins (see qemu.Machine)


@dataclass
class GuestRuns:
    runs: List[qemu.Run] = field(default_factory=list)


def log_path(layout: Layout, label: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return layout.out / "logs" / f"{stamp}-{label}.log"


# Steps that need a virtio disk: the scratch disk, the build image, and the
# attack tests that read a block device's page cache (on the scratch disk).
DISK_STEPS = ("disk", "build")


def needs_disk(step: str) -> bool:
    name, _, arg = step.partition(":")
    return name in DISK_STEPS or (name == "lkdtm" and arg in attacks.DISK_ATTACKS)


def check_steps(kind: machines.Kind, steps: Sequence[str]) -> None:
    """Refuse steps the machine cannot run (a disk step on Bochs)."""
    bad = [s for s in steps if needs_disk(s)]
    if bad and not kind.has_disk:
        raise HarnessError(f"machine {kind.name} has no disk (no virtio), and step"
                           f"{'s' if len(bad) > 1 else ''} {', '.join(bad)} need"
                           f"{'' if len(bad) > 1 else 's'} one",
                           "run them on a QEMU machine (--machine qemu or qemu-pti)")


def check_machine(name: str, steps: Sequence[str] = (), install: bool = True) -> machines.Kind:
    """An unknown machine, a step it cannot run or a missing emulator fails
    before any build; `install`: Bochs's packages are installed first."""
    kind = machines.get(name)
    check_steps(kind, steps)
    if install and kind.emulator == machines.BOCHS:
        bochs.check()
    return kind


def check_disk_machine(name: str, what: str) -> machines.Kind:
    """A command that needs the scratch disk runs on a QEMU machine only."""
    kind = check_machine(name, install=False)
    if not kind.has_disk:
        raise HarnessError(f"{what} need a disk, and machine {kind.name} has none (no virtio)",
                           "use --machine qemu or qemu-pti")
    return kind


def check_boot(name: str, steps: Sequence[str], dry_run: bool = False) -> machines.Kind:
    """`./xpfo boot`'s machine, checked before anything is built: a Bochs
    machine runs steps only (its console is not a terminal). A dry run
    installs nothing."""
    kind = check_machine(name, steps, install=not dry_run)
    if kind.emulator == machines.BOCHS and not steps:
        raise HarnessError(f"machine {kind.name} runs steps only (its console is not "
                           "a terminal)", "name the steps, e.g. ./xpfo boot --machine "
                           f"{kind.name} info")
    return kind


def machine(req: GuestRequest, layout: Layout = LAYOUT) -> qemu.Machine:
    kind = machines.get(req.machine)
    check_steps(kind, req.steps)
    if (req.disk or req.extra_disks) and not kind.has_disk:
        raise HarnessError(f"machine {kind.name} has no disk (no virtio)",
                           "run this on a QEMU machine (--machine qemu or qemu-pti)")
    if req.plugins and kind.emulator != machines.QEMU:
        raise HarnessError(f"machine {kind.name} runs {kind.emulator}, which takes no "
                           "TCG plugins", "run this on a QEMU machine (--machine qemu)")
    params = list(req.params)
    if req.steps:
        params.append("xh.steps=" + ",".join(req.steps))
    disks = [initramfs.scratch_disk(layout)] if req.disk else []
    return qemu.Machine(kernel=req.kernel or layout.bzimage, initrd=layout.initramfs,
                        cpus=kind.vcpus(req.cpus),
                        mem_mb=req.mem_mb, params=params, disks=disks + list(req.extra_disks),
                        tcg_threads=req.tcg_threads, icount=req.icount, kind=kind,
                        plugins=req.plugins)


def deadline(req: GuestRequest) -> float:
    """The request's deadline on its machine (Bochs is slower than QEMU)."""
    return req.timeout * machines.get(req.machine).slowdown


def start(m: qemu.Machine, timeout: float, log: Path, echo: bool = False) -> qemu.Run:
    """Boot on the machine's emulator."""
    if m.kind.emulator == machines.BOCHS:
        return bochs.run(m, timeout, log, echo=echo)
    return qemu.run(m, timeout, log, echo=echo)


def run(req: GuestRequest, layout: Layout = LAYOUT, echo: bool = False) -> qemu.Run:
    m = machine(req, layout)
    log = log_path(layout, req.label)
    on = "" if m.kind.name == machines.DEFAULT else f" on {m.kind.name}"
    printer.info("guest", f"{req.label}{on}: {m.cpus} vCPUs, {req.mem_mb} MiB, "
                 f"{' '.join(req.params) or 'no extra parameters'}; log {log}")
    r = start(m, deadline(req), log, echo=echo)
    runner = ("" if r.runner_started is None
              else f" (runner started after {r.runner_started:.1f}s)")
    printer.info("guest", f"{req.label}: {r.outcome.value} after "
                 f"{printer.fmt_elapsed(r.elapsed)}{runner}")
    if r.outcome is not qemu.Outcome.POWERED_OFF:
        printer.raw(f"--- last console lines of {req.label} ({r.message}) ---")
        printer.raw(r.last_lines(25))
        printer.raw("---")
    return r


def boot(req: GuestRequest, dry_run: bool = False) -> int:
    """`./xpfo boot`: with `dry_run` print what a boot would run; without
    steps a shell on the console; with steps run them and judge the boot.
    The exit status."""
    m = machine(req)
    if dry_run:
        if m.kind.emulator == machines.BOCHS:
            bochs.dry_run(m, bochs.Files(Path("xpfo-bochs")))
        else:
            printer.command(m.qemu_args(interactive=not req.steps))
        return 0
    if not req.steps:
        return qemu.interactive(m)
    r = run(req, echo=True)
    verdict = judge.boot(r)
    for reason in verdict.reasons:
        printer.raw(f"FAIL: {reason}")
    return 0 if verdict.passed else 1
