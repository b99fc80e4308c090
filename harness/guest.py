"""Boot the built kernel with a list of guest steps and collect the console."""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence

from . import initramfs, printer, qemu
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


@dataclass
class GuestRuns:
    runs: List[qemu.Run] = field(default_factory=list)


def log_path(layout: Layout, label: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return layout.out / "logs" / f"{stamp}-{label}.log"


def machine(req: GuestRequest, layout: Layout = LAYOUT) -> qemu.Machine:
    params = list(req.params)
    if req.steps:
        params.append("xh.steps=" + ",".join(req.steps))
    disks = [initramfs.scratch_disk(layout)] if req.disk else []
    return qemu.Machine(kernel=req.kernel or layout.bzimage, initrd=layout.initramfs,
                        cpus=req.cpus,
                        mem_mb=req.mem_mb, params=params, disks=disks + list(req.extra_disks),
                        tcg_threads=req.tcg_threads, icount=req.icount)


def run(req: GuestRequest, layout: Layout = LAYOUT, echo: bool = False) -> qemu.Run:
    m = machine(req, layout)
    log = log_path(layout, req.label)
    printer.info("guest", f"{req.label}: {req.cpus} vCPUs, {req.mem_mb} MiB, "
                 f"{' '.join(req.params) or 'no extra parameters'}; log {log}")
    r = qemu.run(m, req.timeout, log, echo=echo)
    printer.info("guest", f"{req.label}: {r.outcome.value} after {printer.fmt_elapsed(r.elapsed)}")
    if r.outcome is not qemu.Outcome.POWERED_OFF:
        printer.raw(f"--- last console lines of {req.label} ({r.message}) ---")
        printer.raw(r.last_lines(25))
        printer.raw("---")
    return r
