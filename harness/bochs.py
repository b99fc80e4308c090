"""The Bochs machines: the same bzImage and initramfs, booted from an isolinux CD.

Bochs 2.7 (Debian) emulates the CPU features TCG lacks: PCID, INVPCID,
global pages kept across CR3 writes and, with the `tigerlake` model, CET.
It has no virtio and no -kernel: isolinux on a CD (built per run with
xorriso) loads the kernel and the initramfs with the command line in
isolinux.cfg. COM1 is the console and COM2 the runner's results port, both
TCP connections from Bochs to listeners of the harness on 127.0.0.1.

What Debian's build imposes: no `nogui` display, and its `rfb` display
serves the VGA screen by VNC on every interface, without a password, with
no option to bind it to loopback. So Bochs draws into the `x` display
(Debian's bochs-x) of a private Xvfb that the run starts on a display
number Xvfb picks itself, with `-nolisten tcp`: reachable through its Unix
socket only, and gone when the run ends. Neither process listens on a
network port (tests/test_integration_machines.py checks it during a boot).
The internal debugger is built in (-rc FILE
holding `c` starts the machine without stopping); `ignore_bad_msrs=1`, or
Linux's read of MSR 0x1a0 triple-faults. Bochs has no -no-reboot: a reset
after the power-on one (a panic with panic=-1, a triple fault) ends the run,
as QEMU's -no-reboot does. Bochs exits by itself when the guest powers off
through ACPI (it logs that as a panic and exits with status 1); where it
does not, the kernel's "reboot: Power down" ends the run after a grace.
"""

import contextlib
import os
import re
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple, Union

from . import console, deps, errors, machines, printer, qemu
from .errors import HarnessError

BOCHS = "bochs-bin"     # /usr/bin/bochs is a wrapper that adds -q
XORRISO = "xorriso"
XVFB = "Xvfb"
# how long Xvfb may take to say which display it took
XVFB_START = 20.0
ISOLINUX_BIN = Path(deps.BOCHS_PACKAGES["isolinux"])
LDLINUX = Path(deps.BOCHS_PACKAGES["syslinux-common"])
BIOS = Path(deps.BOCHS_PACKAGES["bochsbios"])
VGABIOS = Path(deps.BOCHS_PACKAGES["vgabios"])
# after the kernel's power-off message, how long Bochs may take to stop
POWER_OFF_GRACE = 3.0
HOST = "127.0.0.1"      # where the serial ports' listeners are

# Bochs's own log: a reset after power-on, and a panic (which exits it)
_RESET = re.compile(r"^(\d+)i\[SYS\s*\] bx_pc_system_c::Reset\((\w+)\)")
_PANIC = re.compile(r"^\d+p\[[^\]]*\] (?:>>PANIC<< )?(.*)")
_POWER_DOWN = "reboot: Power down"
_SOFT_OFF = "ACPI control: soft power off"   # Bochs's way out at ACPI S5


@dataclass(frozen=True)
class Files:
    """One run's files, in a directory of its own."""

    dir: Path

    @property
    def iso(self) -> Path:
        return self.dir / "boot.iso"

    @property
    def isolinux_cfg(self) -> Path:
        return self.dir / "isolinux.cfg"

    @property
    def bochsrc(self) -> Path:
        return self.dir / "bochsrc"

    @property
    def debugger_rc(self) -> Path:
        return self.dir / "debugger.rc"


def isolinux_cfg(m: qemu.Machine) -> str:
    """Boot the kernel at once with the machine's command line."""
    return ("DEFAULT xh\nPROMPT 0\nTIMEOUT 0\nLABEL xh\n"
            "  KERNEL /kernel\n  INITRD /initrd\n"
            f"  APPEND {m.cmdline()}\n")


def iso_command(m: qemu.Machine, files: Files) -> List[str]:
    """xorriso: an El Torito CD of isolinux, the kernel and the initramfs
    (grafted from where they are: nothing is copied)."""
    return [XORRISO, "-as", "mkisofs", "-quiet", "-o", str(files.iso),
            "-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat", "-no-emul-boot",
            "-boot-load-size", "4", "-boot-info-table", "-R", "-graft-points",
            f"isolinux/isolinux.bin={ISOLINUX_BIN}", f"isolinux/ldlinux.c32={LDLINUX}",
            f"isolinux/isolinux.cfg={files.isolinux_cfg}",
            f"kernel={m.kernel}", f"initrd={m.initrd}"]


def bochsrc(m: qemu.Machine, files: Files, ports: Tuple[int, int],
            ips: int = machines.BOCHS_IPS) -> str:
    """The machine as a bochsrc: CPU model and count, memory, the CD; COM1
    (console) and COM2 (results) connect to `ports` on 127.0.0.1."""
    if m.kind.emulator != machines.BOCHS:
        raise HarnessError(f"machine {m.kind.name} is not a Bochs machine")
    if m.disks:
        raise HarnessError(f"machine {m.kind.name} has no virtio disks",
                           "run the steps that need a disk on qemu or qemu-pti")
    return "\n".join([
        f"# xpfo machine {m.kind.name}: {m.kind.description}",
        f"cpu: model={m.kind.cpu_model}, count={m.cpus}, ips={ips}, "
        "reset_on_triple_fault=0, ignore_bad_msrs=1",
        f"memory: guest={m.mem_mb}, host={m.mem_mb}",
        f"romimage: file={BIOS}, options=fastboot",
        f"vgaromimage: file={VGABIOS}",
        # an X window on the run's private Xvfb (DISPLAY): nothing listens
        "display_library: x",
        "pci: enabled=1, chipset=i440fx",
        f"ata0-master: type=cdrom, path={files.iso}, status=inserted",
        "boot: cdrom",
        # a socket, not mode=file: Bochs buffers a file (4 KiB), and a guest
        # killed at its deadline would lose its last console lines
        f"com1: enabled=1, mode=socket-client, dev={HOST}:{ports[0]}",
        f"com2: enabled=1, mode=socket-client, dev={HOST}:{ports[1]}",
        "sound: driver=dummy",
        "speaker: enabled=0",
        # stderr, which is not buffered: a reset is seen when it happens
        "log: -",
        "panic: action=fatal",
        "error: action=report",
        "info: action=report",
        "debug: action=ignore",
        ""])


def command(files: Files) -> List[str]:
    return [BOCHS, "-q", "-f", str(files.bochsrc), "-rc", str(files.debugger_rc)]


def check() -> None:
    """Bochs, its BIOSes, isolinux and xorriso: installed on first use."""
    deps.ensure(quiet=True, packages=deps.BOCHS_PACKAGES)
    for exe in (BOCHS, XORRISO, XVFB):
        if shutil.which(exe) is None:
            raise HarnessError(f"{exe} not found",
                               f"install {' '.join(deps.BOCHS_PACKAGES)} (apt-get)")


def prepare(m: qemu.Machine, files: Files, ports: Tuple[int, int]) -> List[str]:
    """Write isolinux.cfg, build the CD, write the bochsrc and the debugger's
    commands; return the Bochs command."""
    files.dir.mkdir(parents=True, exist_ok=True)
    files.isolinux_cfg.write_text(isolinux_cfg(m))
    iso = iso_command(m, files)
    printer.command(iso)
    try:
        subprocess.run(iso, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        raise errors.from_called_process(e) from None
    files.bochsrc.write_text(bochsrc(m, files, ports))
    files.debugger_rc.write_text("c\n")
    return command(files)


def xvfb_command(fd: int) -> List[str]:
    """Xvfb on the first free display, which it writes to `fd`; local
    (Unix socket) connections only."""
    return [XVFB, "-displayfd", str(fd), "-nolisten", "tcp", "-nolisten", "udp",
            "-screen", "0", "800x600x16", "-nocursor"]


@contextlib.contextmanager
def private_display(workdir: Path) -> Iterator[Tuple[str, "subprocess.Popen[bytes]"]]:
    """A private X server for one run: yields its DISPLAY and its process,
    and kills it when the run ends, however it ends."""
    rfd, wfd = os.pipe()
    err = workdir / "xvfb.log"
    try:
        with open(err, "wb") as errf:
            cmd = xvfb_command(wfd)
            printer.command(cmd)
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=errf,
                                    stderr=subprocess.STDOUT, pass_fds=(wfd,),
                                    start_new_session=True)
    except OSError as e:
        os.close(rfd)
        raise HarnessError(f"cannot start {XVFB}: {e}",
                           "install xvfb (apt-get), or run ./xpfo setup") from None
    finally:
        os.close(wfd)
    try:
        got = b""
        deadline = time.monotonic() + XVFB_START
        while not got.endswith(b"\n") and proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([rfd], [], [], min(left, 0.2))
            if ready:
                chunk = os.read(rfd, 64)
                if not chunk:
                    break
                got += chunk
        number = got.strip().decode(errors="replace")
        if not number.isdigit():
            tail = err.read_text(errors="replace").strip().splitlines()[-3:]
            raise HarnessError(f"{XVFB} did not start (it said: {' / '.join(tail) or 'nothing'})",
                               "Bochs draws its screen into a private Xvfb; check that "
                               "xvfb is installed")
        yield f":{number}", proc
    finally:
        os.close(rfd)
        qemu.stop(proc)


def listening_sockets(pid: int) -> List[str]:
    """The TCP and UDP sockets process `pid` has open that accept from a
    network (listening TCP sockets, bound UDP ones), as "address:port" in
    /proc/net's hex, loopback ones left out. A process in another network
    namespace is read through its own /proc/PID/net."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:     # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table, listening in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) < 10 or f[9] not in inodes or f[3] != listening:
                continue
            addr = f[1].split(":")[0]
            if addr in ("0100007F", "00000000000000000000000001000000"):
                continue
            out.append(f"{table} {f[1]}")
    return out


# the ports a dry run shows (a run listens on free ones)
DRY_RUN_PORTS = (5555, 5556)


def dry_run(m: qemu.Machine, files: Files) -> None:
    """What a run would do, pasteable: the files it writes, the commands."""
    rc = bochsrc(m, files, DRY_RUN_PORTS)   # refuses what this machine cannot do
    printer.command(["mkdir", "-p", str(files.dir)])
    printer.raw(f"# {files.isolinux_cfg}:\n{isolinux_cfg(m)}")
    printer.command(iso_command(m, files))
    printer.raw(f"# {files.bochsrc}:\n{rc}")
    printer.raw(f"# {files.debugger_rc}:\nc\n")
    printer.raw(f"# COM1 (console) and COM2 (results) connect to {HOST}:{DRY_RUN_PORTS[0]} "
                f"and :{DRY_RUN_PORTS[1]}; listen there first, e.g. "
                f"nc -l {HOST} {DRY_RUN_PORTS[0]}")
    printer.raw("# the screen goes to a private X server: start one, and run Bochs with "
                "DISPLAY=:N")
    printer.command(xvfb_command(1))
    printer.command(command(files))


class _Port(qemu.StreamReader):
    """A serial port that Bochs connects to (mode=socket-client): accept
    one connection on a free port of 127.0.0.1, pass on its lines."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        super().__init__(on_line)
        self.server = socket.create_server((HOST, 0))
        self.server.settimeout(0.05)
        self.port: int = self.server.getsockname()[1]

    def follow(self, lines: qemu.LineBuffer) -> None:
        conn = None
        while conn is None and not self.finish.is_set():
            try:
                conn, _ = self.server.accept()
            except socket.timeout:
                continue
        self.server.close()
        if conn is None:
            return
        with conn:
            conn.settimeout(0.05)
            while True:
                try:
                    chunk = conn.recv(65536)
                except socket.timeout:
                    # after the finish, what is left has been read
                    if self.finish.is_set():
                        break
                    continue
                if not chunk:
                    break
                lines.feed(chunk)

    def close(self) -> None:
        super().close()
        self.server.close()


class _End:
    """Why the run should stop before Bochs exits on its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reason = ""           # a reset or a Bochs panic: the guest stopped
        self.powered_down: Optional[float] = None
        self.last = ""             # Bochs's last log line

    def bochs_line(self, text: str) -> None:
        if text.strip():
            self.last = text.strip()
        m = _RESET.match(text)
        if m and int(m.group(1)) > 0:
            self._set(f"the guest reset the machine (Bochs {m.group(2).lower()} reset; "
                      "a panic with panic=-1 or a triple fault)")
            return
        m = _PANIC.match(text)
        if m:
            what = m.group(1).strip()
            self._set("the guest powered off" if what == _SOFT_OFF
                      else f"Bochs panic: {what[:160]}")

    def _set(self, reason: str) -> None:
        with self.lock:
            if not self.reason:
                self.reason = reason

    def console_line(self, text: str) -> None:
        if self.powered_down is None and _POWER_DOWN in text:
            self.powered_down = time.monotonic()


def run(m: qemu.Machine, timeout: float, log: Path, echo: bool = False,
        watch: Optional[Callable[[console.Console], None]] = None,
        started: Optional[Callable[[List[int]], None]] = None) -> qemu.Run:
    """Boot on Bochs: the same contract as qemu.run (console streamed to
    `log` and parsed, the results port followed, killed at the deadline,
    Ctrl-C or an exception kills it). Bochs's own log goes to `log`.bochs.
    `started`, if given, is called once with the pids of Bochs and its X
    server when the guest's console has begun."""
    check()
    log.parent.mkdir(parents=True, exist_ok=True)
    own = log.with_name(log.name + ".bochs")
    parser = console.Parser()
    lock = threading.Lock()
    end = _End()
    clock = qemu.RunnerClock()
    with tempfile.TemporaryDirectory(prefix="xpfo-bochs-") as tmp, \
            open(log, "w", errors="replace") as logf, \
            private_display(Path(tmp)) as (display, xvfb):

        def take(text: str) -> None:
            with lock:
                logf.write(text)
                logf.flush()
                parser.feed(text)
                clock.see(text)

        def take_console(text: str) -> None:
            take(text)
            end.console_line(text)
            if echo:
                printer.raw(console.strip(text))

        ports = [_Port(take_console), _Port(take)]
        try:
            args = prepare(m, Files(Path(tmp)), (ports[0].port, ports[1].port))
            printer.command(args)
            with open(own, "wb") as ownf:
                proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=ownf,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        cwd=tmp, env={**os.environ, "DISPLAY": display})
        except OSError as e:
            for p in ports:
                p.server.close()
            raise HarnessError(f"cannot start {BOCHS}: {e}") from None
        except BaseException:
            for p in ports:
                p.server.close()
            raise
        timed_out = False
        try:
            readers: List[Union[_Port, qemu._Tail]] = [*ports, qemu._Tail(own, end.bochs_line)]
            for t in readers:
                t.start()
            try:
                seen = 0
                while proc.poll() is None:
                    now = time.monotonic()
                    if now - clock.start >= timeout:
                        timed_out = True
                        break
                    if end.reason:
                        break
                    if end.powered_down is not None and \
                            now - end.powered_down >= POWER_OFF_GRACE:
                        break
                    with lock:
                        n = len(parser.console.lines)
                    if started is not None and n:
                        started([proc.pid, xvfb.pid])
                        started = None
                    if watch is not None and n != seen:
                        seen = n
                        watch(parser.console)
                    time.sleep(0.05)
                qemu.stop(proc)
            finally:
                for t in readers:
                    t.close()
            for t, what in zip(readers, ("console (COM1)", "results port (COM2)",
                                         "Bochs log")):
                if t.error is not None:
                    raise HarnessError(f"cannot read the guest's {what}: {t.error}")
        except BaseException:
            qemu.stop(proc)
            raise
    elapsed = time.monotonic() - clock.start
    rc = proc.returncode
    con = parser.console
    outcome, msg = qemu.classify(con, timed_out, rc, timeout, BOCHS)
    if outcome is not qemu.Outcome.POWERED_OFF and end.reason:
        msg = f"{end.reason}; {msg}"
    if outcome is qemu.Outcome.QEMU_FAILED:
        msg += f": {end.last[:200]!r} (its log: {own})"
    return qemu.Run(m, outcome, elapsed, con, log, rc, msg, clock.started)
