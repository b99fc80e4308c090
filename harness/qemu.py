"""The guest machine as data, and a runner that streams its console."""

import enum
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from . import console, machines, printer
from .errors import HarnessError

QEMU = "qemu-system-x86_64"
RESULTS_FILE = Path("results.ttyS1")   # where --dry-run's command sends ttyS1


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
    # TCG plugins, each a -plugin argument: the shared object and its
    # arguments (plugin_arg() writes one)
    plugins: Sequence[str] = ()
    # "single": all vCPUs on one host thread. Multi-threaded TCG has been
    # seen to execute a stale INT3 of the kernel's own text patching (see
    # docs/TESTING.md); tests use "single", benchmarks "multi".
    tcg_threads: str = "multi"
    # -icount shift=0,sleep=off: the guest clock advances one nanosecond per
    # guest instruction, so a guest's timings are counts of its instructions
    # (repeatable for workloads that keep the CPU busy, not for those that
    # wait for the disk). QEMU runs such a guest's vCPUs round-robin on one
    # host thread.
    icount: bool = False
    # the emulator and CPU model (machines.py); its kernel parameters come
    # before `params`
    kind: machines.Kind = machines.KINDS[machines.DEFAULT]

    def cmdline(self) -> str:
        # no_timer_check: on a loaded host TCG can miss the IO-APIC timer
        # check's deadline and panic at boot ("IO-APIC + timer doesn't work").
        base = [f"console={self.kind.console}", "panic=-1", "loglevel=7", "no_timer_check"]
        return " ".join(base + list(self.kind.params) + list(self.params))

    def qemu_args(self, interactive: bool = False,
                  results: Optional[Path] = None) -> List[str]:
        """The QEMU command; `results` is the file that the guest's second
        serial port (/dev/ttyS1, where the runner writes its RESULT lines)
        is written to."""
        if self.kind.emulator != machines.QEMU:
            raise HarnessError(f"machine {self.kind.name} is not a QEMU machine")
        # KVM does not start guests on these machines: TCG, with every
        # feature TCG can emulate. TCG has no PCID/INVPCID.
        threads = "single" if self.icount else self.tcg_threads
        args = [QEMU, "-accel", f"tcg,thread={threads}", "-cpu", self.kind.cpu_model,
                "-smp", str(self.cpus),
                "-m", str(self.mem_mb), "-kernel", str(self.kernel),
                "-initrd", str(self.initrd), "-append", self.cmdline(),
                "-no-reboot", "-nodefaults", "-display", "none"]
        if self.icount:
            args += ["-icount", "shift=0,sleep=off"]
        # the console multiplexed with QEMU's monitor on stdio: a guest
        # that hangs is asked for its CPUs' backtraces before it is killed
        # (dump_hung())
        args += ["-serial", "mon:stdio"]
        if not interactive:
            args += ["-serial", f"file:{results or RESULTS_FILE}"]
        # snapshot=on: the guest's writes go to a temporary overlay, so every
        # boot sees the image as built, and a guest killed mid-write (a
        # timeout, a crash) cannot leave a broken file system for later runs.
        for disk in self.disks:
            args += ["-drive",
                     f"file={disk},if=virtio,format=raw,cache=unsafe,snapshot=on"]
        for plugin in self.plugins:
            args += ["-plugin", plugin]
        return args + list(self.extra_args)


def plugin_arg(path: Path, **args: str) -> str:
    """A -plugin argument: the shared object, then its name=value
    arguments (QEMU's option syntax: a comma in a value is doubled)."""
    return ",".join(str(x).replace(",", ",,")
                    for x in [path, *(f"{k}={v}" for k, v in args.items())])


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
    # seconds from the start to the runner's first line (its KTAP header)
    runner_started: Optional[float] = None

    def last_lines(self, n: int = 30) -> str:
        return "\n".join(self.console.lines[-n:])


def check_qemu() -> None:
    if shutil.which(QEMU) is None:
        raise HarnessError(f"{QEMU} not found", "run ./xpfo setup (installs qemu-system-x86)")


def stop(proc: "subprocess.Popen[bytes]") -> None:
    """Kill the guest's process group and reap it, whatever comes meanwhile.

    QEMU runs in its own session (a Ctrl-C on the terminal does not reach
    it), so the harness must kill it; a second Ctrl-C must not stop that."""
    while True:
        try:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            return
        except KeyboardInterrupt:
            continue


class LineBuffer:
    """Bytes in, whole lines out (decoded, newline kept); what is left of a
    last line without its newline comes out at flush()."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self.on_line = on_line
        self.buf = b""

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            self.on_line(line.decode("utf-8", errors="replace") + "\n")

    def flush(self) -> None:
        if self.buf:
            self.on_line(self.buf.decode("utf-8", errors="replace") + "\n")
            self.buf = b""


class StreamReader(threading.Thread):
    """A thread that passes a serial stream's lines to `on_line` until
    close(); an exception in it is kept in `error` for the caller's thread
    to report. Subclasses read in `follow()`."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        super().__init__(daemon=True)
        self.on_line = on_line
        self.finish = threading.Event()
        self.error: Optional[BaseException] = None

    def follow(self, lines: LineBuffer) -> None:
        raise NotImplementedError

    def run(self) -> None:
        lines = LineBuffer(self.on_line)
        try:
            self.follow(lines)
            lines.flush()
        except BaseException as e:  # reported by the caller's thread
            self.error = e

    def close(self) -> None:
        self.finish.set()
        self.join()


class _Tail(StreamReader):
    """Follow a file that QEMU writes (a serial port), line by line."""

    def __init__(self, path: Path, on_line: Callable[[str], None]) -> None:
        super().__init__(on_line)
        self.path = path

    def follow(self, lines: LineBuffer) -> None:
        with open(self.path, "rb") as f:
            while True:
                last = self.finish.is_set()
                chunk = f.read()
                if chunk:
                    lines.feed(chunk)
                elif last:
                    break
                else:
                    self.finish.wait(0.05)


# What a guest still running at its deadline is asked, through the console
# multiplexed with the monitor (QEMU's escape Ctrl-A): Ctrl-A b sends a
# serial break, and the key after it is a magic SysRq (l: a backtrace of
# every CPU that is not idle, by NMI; w: the tasks blocked in D state);
# Ctrl-A c switches to the monitor, whose registers of every vCPU name
# where each one is even with the guest's interrupts off.
HUNG_SYSRQ = (b"l", b"w")
HUNG_MONITOR = (b"info registers -a\n",)
# seconds the guest gets to print each answer
HUNG_WAIT = 3.0


def dump_hung(proc: "subprocess.Popen[bytes]") -> None:
    """Ask a guest that missed its deadline where its CPUs are; the answers
    come on the console, into the log. Best effort: a QEMU that stopped
    reading is killed all the same."""
    if proc.stdin is None:
        return
    try:
        for key in HUNG_SYSRQ:
            proc.stdin.write(b"\x01b")
            proc.stdin.flush()
            time.sleep(0.5)
            proc.stdin.write(key)
            proc.stdin.flush()
            time.sleep(HUNG_WAIT)
        proc.stdin.write(b"\x01c")
        for cmd in HUNG_MONITOR:
            proc.stdin.write(cmd)
        proc.stdin.flush()
        time.sleep(HUNG_WAIT)
    except (OSError, ValueError):
        pass


def run(machine: Machine, timeout: float, log: Path, echo: bool = False,
        watch: Optional[Callable[[console.Console], None]] = None) -> Run:
    """Boot, stream the console to `log`, kill the guest at the deadline.

    The second serial port (the runner's results) is followed too and its
    lines go into the same log and parser. Ctrl-C or an exception kills the
    guest before it propagates."""
    check_qemu()
    log.parent.mkdir(parents=True, exist_ok=True)
    results = log.with_name(log.name + ".ttyS1")
    results.write_bytes(b"")
    args = machine.qemu_args(results=results)
    printer.command(args)
    parser = console.Parser()
    lock = threading.Lock()
    clock = RunnerClock()
    try:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        results.unlink(missing_ok=True)
        raise HarnessError(f"cannot start {QEMU}: {e}") from None
    timed_out = threading.Event()

    def _kill() -> None:
        timed_out.set()
        dump_hung(proc)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, _kill)
    timer.daemon = True
    assert proc.stdout is not None
    try:
        with open(log, "w", errors="replace") as logf:

            def take(text: str) -> None:
                with lock:
                    logf.write(text)
                    logf.flush()
                    parser.feed(text)
                    clock.see(text)

            tail = _Tail(results, take)
            tail.start()
            try:
                timer.start()
                for raw in proc.stdout:
                    text = raw.decode("utf-8", errors="replace")
                    take(text)
                    if echo:
                        printer.raw(console.strip(text))
                    if watch is not None:
                        watch(parser.console)
                rc = proc.wait()
            finally:
                timer.cancel()
                tail.close()
            if tail.error is not None:
                raise HarnessError(f"cannot read the guest's results port {results}: "
                                   f"{tail.error}")
    except BaseException:
        stop(proc)
        raise
    finally:
        results.unlink(missing_ok=True)
    elapsed = time.monotonic() - clock.start
    con = parser.console
    outcome, msg = classify(con, timed_out.is_set(), rc, timeout, QEMU)
    return Run(machine, outcome, elapsed, con, log, rc, msg, clock.started)


def classify(con: console.Console, timed_out: bool, rc: Optional[int], timeout: float,
             emulator: str) -> Tuple[Outcome, str]:
    """How a guest ended, from its console and the emulator's exit status."""
    if timed_out:
        return Outcome.TIMEOUT, f"guest killed after {timeout:.0f}s deadline"
    if con.runner_finished():
        return Outcome.POWERED_OFF, ""
    if not con.lines or (rc != 0 and not any("Linux version" in x for x in con.lines)):
        return Outcome.QEMU_FAILED, f"{emulator} exited with {rc}"
    # the log may not outlive the run (CI): say how it ended
    last = next((x for x in reversed(con.lines)
                 if x.strip() and not x.startswith(("XH-RESULT ", "XH-END "))), "")
    return Outcome.CRASHED, (f"guest stopped before its runner finished "
                             f"({emulator} exit status {rc}, last line {last[:160]!r})")


class RunnerClock:
    """When the runner's first line (its KTAP header) came, from the start."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.started: Optional[float] = None

    def see(self, text: str) -> None:
        if self.started is None and console.strip(text).startswith("KTAP version 1"):
            self.started = time.monotonic() - self.start


def interactive(machine: Machine) -> int:
    """Boot with the console on this terminal (Ctrl-a x quits)."""
    check_qemu()
    args = machine.qemu_args(interactive=True)
    printer.command(args)
    return subprocess.call(args)
