"""The guest machine as data, and a runner that streams its console."""

import enum
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, TextIO

from . import console, printer
from .errors import HarnessError

QEMU = "qemu-system-x86_64"


@dataclass(frozen=True)
class Machine:
    """Everything needed to start one guest."""

    kernel: Path
    initrd: Path
    cpus: int = 2
    mem_mb: int = 1024
    params: Sequence[str] = ()
    disks: Sequence[Path] = ()   # virtio disks: /dev/vda, ...; never written
    extra_args: Sequence[str] = ()
    # "single": all vCPUs on one host thread. Multi-threaded TCG has been
    # seen to execute a stale INT3 of the kernel's own text patching (see
    # docs/TESTING.md); tests use "single", benchmarks "multi".
    tcg_threads: str = "multi"

    def cmdline(self) -> str:
        # no_timer_check: on a loaded host TCG can miss the IO-APIC timer
        # check's deadline and panic at boot ("IO-APIC + timer doesn't work").
        base = ["console=ttyS0", "panic=-1", "loglevel=7", "no_timer_check"]
        return " ".join(base + list(self.params))

    def qemu_args(self, interactive: bool = False) -> List[str]:
        # KVM does not start guests on these machines: TCG, with every
        # feature TCG can emulate. TCG has no PCID/INVPCID.
        args = [QEMU, "-accel", f"tcg,thread={self.tcg_threads}", "-cpu", "max",
                "-smp", str(self.cpus),
                "-m", str(self.mem_mb), "-kernel", str(self.kernel),
                "-initrd", str(self.initrd), "-append", self.cmdline(),
                "-no-reboot", "-nodefaults", "-display", "none"]
        if interactive:
            args += ["-serial", "mon:stdio"]
        else:
            args += ["-serial", "stdio", "-monitor", "none"]
        # snapshot=on: the guest's writes go to a temporary overlay, so every
        # boot sees the image as built, and a guest killed mid-write (a
        # timeout, a crash) cannot leave a broken file system for later runs.
        for disk in self.disks:
            args += ["-drive",
                     f"file={disk},if=virtio,format=raw,cache=unsafe,snapshot=on"]
        return args + list(self.extra_args)


class Outcome(enum.Enum):
    POWERED_OFF = "powered off"   # the runner finished and the guest exited
    TIMEOUT = "timeout"           # killed at the deadline
    CRASHED = "crashed"           # exited without the runner finishing (panic)
    QEMU_FAILED = "qemu failed"   # qemu itself could not start or failed


@dataclass
class Run:
    machine: Machine
    outcome: Outcome
    elapsed: float
    console: console.Console
    log: Path
    returncode: Optional[int] = None
    message: str = ""

    def last_lines(self, n: int = 30) -> str:
        return "\n".join(self.console.lines[-n:])


def check_qemu() -> None:
    if shutil.which(QEMU) is None:
        raise HarnessError(f"{QEMU} not found", "run ./xpfo setup (installs qemu-system-x86)")


def run(machine: Machine, timeout: float, log: Path, echo: bool = False,
        watch: Optional[callable] = None) -> Run:
    """Boot, stream the console to `log`, kill the guest at the deadline."""
    check_qemu()
    args = machine.qemu_args()
    printer.command(args)
    log.parent.mkdir(parents=True, exist_ok=True)
    parser = console.Parser()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        raise HarnessError(f"cannot start {QEMU}: {e}") from None
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, _kill)
    timer.daemon = True
    timer.start()
    assert proc.stdout is not None
    try:
        with open(log, "w", errors="replace") as logf:
            for raw in proc.stdout:
                text = raw.decode("utf-8", errors="replace")
                logf.write(text)
                logf.flush()
                parser.feed(text)
                if echo:
                    printer.raw(console.strip(text))
                if watch is not None:
                    watch(parser.console)
    finally:
        rc = proc.wait()
        timer.cancel()
    elapsed = time.monotonic() - start
    con = parser.console
    if timed_out.is_set():
        outcome, msg = Outcome.TIMEOUT, f"guest killed after {timeout:.0f}s deadline"
    elif con.done:
        outcome, msg = Outcome.POWERED_OFF, ""
    elif not con.lines or (rc != 0 and not any("Linux version" in x for x in con.lines)):
        outcome, msg = Outcome.QEMU_FAILED, f"{QEMU} exited with {rc}"
    else:
        outcome, msg = Outcome.CRASHED, "guest stopped before its runner finished"
    return Run(machine, outcome, elapsed, con, log, rc, msg)


def interactive(machine: Machine) -> int:
    """Boot with the console on this terminal (Ctrl-a x quits)."""
    check_qemu()
    args = machine.qemu_args(interactive=True)
    printer.command(args)
    return subprocess.call(args)
