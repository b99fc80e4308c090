"""The guest's initramfs: busybox-static, the runner, and our static programs."""

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, List

from . import printer
from .errors import HarnessError
from .paths import LAYOUT, Layout

BUSYBOX = Path("/bin/busybox")
CFLAGS = ["-static", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread"]


@dataclass(frozen=True)
class Entry:
    path: str          # inside the archive, no leading slash
    mode: int          # full st_mode
    data: bytes = b""
    rdev: tuple = (0, 0)


class Newc:
    """Writer for the 'newc' cpio format the kernel unpacks."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.ino = 1

    def _pad(self, n: int) -> None:
        self.out.write(b"\0" * ((4 - n % 4) % 4))

    def add(self, e: Entry) -> None:
        name = e.path.encode() + b"\0"
        fields = [self.ino, e.mode, 0, 0, 2 if stat.S_ISDIR(e.mode) else 1, 0,
                  len(e.data), 0, 0, e.rdev[0], e.rdev[1], len(name), 0]
        self.ino += 1
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
        self.out.write(hdr + name)
        self._pad(len(hdr) + len(name))
        self.out.write(e.data)
        self._pad(len(e.data))

    def close(self) -> None:
        self.add(Entry("TRAILER!!!", 0))


def _pid() -> int:
    return os.getpid()


def private_tmp(path: Path) -> Path:
    """A temporary name beside @path that is this process's alone, so that
    two runs of the harness building the same file at once (two benches
    started together) do not move each other's half-written file."""
    return path.with_name(f".{path.name}.{_pid()}.tmp")


def compile_programs(layout: Layout = LAYOUT) -> List[Path]:
    """Build every guest/src/*.c into a static binary (only when changed)."""
    out = layout.guest_build / "bin"
    out.mkdir(parents=True, exist_ok=True)
    built = []
    for src in sorted((layout.guest_src / "src").glob("*.c")):
        binary = out / src.stem
        headers = list((layout.guest_src / "src").glob("*.h"))
        newest = max([src.stat().st_mtime] + [h.stat().st_mtime for h in headers])
        if not binary.exists() or binary.stat().st_mtime < newest:
            tmp = private_tmp(binary)
            cmd = ["gcc", *CFLAGS, "-o", str(tmp), str(src)]
            printer.command(cmd)
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                tmp.unlink(missing_ok=True)
                raise HarnessError(f"guest program {src.name} does not compile:\n{r.stderr}")
            tmp.rename(binary)
        built.append(binary)
    return built


def build(layout: Layout = LAYOUT) -> Path:
    if not BUSYBOX.exists():
        raise HarnessError(f"{BUSYBOX} not found", "run ./xpfo setup (installs busybox-static)")
    programs = compile_programs(layout)
    entries: List[Entry] = []
    for d in ["bin", "dev", "proc", "sys", "tmp", "mnt", "xh", "xh/bin", "xh/steps"]:
        entries.append(Entry(d, stat.S_IFDIR | 0o755))
    entries.append(Entry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1)))
    entries.append(Entry("dev/null", stat.S_IFCHR | 0o666, rdev=(1, 3)))
    entries.append(Entry("bin/busybox", stat.S_IFREG | 0o755, BUSYBOX.read_bytes()))
    entries.append(Entry("bin/sh", stat.S_IFLNK | 0o777, b"busybox"))
    entries.append(Entry("init", stat.S_IFREG | 0o755, (layout.guest_src / "init").read_bytes()))
    for f in sorted((layout.guest_src / "steps").iterdir()):
        entries.append(Entry(f"xh/steps/{f.name}", stat.S_IFREG | 0o755, f.read_bytes()))
    for p in programs:
        entries.append(Entry(f"xh/bin/{p.name}", stat.S_IFREG | 0o755, p.read_bytes()))
    target = layout.initramfs
    tmp = private_tmp(target)
    try:
        with open(tmp, "wb") as out:
            w = Newc(out)
            for e in entries:
                w.add(e)
            w.close()
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def scratch_disk(layout: Layout = LAYOUT, size_mb: int = 2048) -> Path:
    """A sparse raw disk the guest formats itself (mke2fs) for page-cache tests."""
    disk = layout.guest_build / "scratch.img"
    disk.parent.mkdir(parents=True, exist_ok=True)
    with open(disk, "wb") as f:
        f.truncate(size_mb << 20)
    return disk


def have_busybox() -> bool:
    return BUSYBOX.exists() and shutil.which("gcc") is not None
