"""Kernel configuration and build: data in, result out."""

import contextlib
import enum
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

from . import config, deps, initramfs, printer, source
from .errors import HarnessError
from .paths import LAYOUT, Layout

BASE_CONFIGS = ["x86_64_defconfig", "kvm_guest.config"]
# Fixed build identity so that ccache hits survive commits and clones.
BUILD_ENV = {
    "KBUILD_BUILD_TIMESTAMP": "2026-01-01 00:00:00 UTC",
    "KBUILD_BUILD_USER": "xpfo",
    "KBUILD_BUILD_HOST": "xpfo",
    "CCACHE_NOHASHDIR": "1",
}
# Number of compiler invocations of a clean build of this configuration,
# used only to show how far a build is (measured; refreshed after each build).
DEFAULT_TOTAL = 1400


class Status(enum.Enum):
    SUCCESS = "success"
    CONFIG_FAILURE = "config failure"
    BUILD_FAILURE = "build failure"


@dataclass(frozen=True)
class BuildRequest:
    src: Path
    obj: Path
    fragment: Path
    jobs: int
    use_ccache: bool = True


@dataclass(frozen=True)
class BuildResult:
    status: Status
    elapsed: float
    kernel: Optional[Path] = None
    compiled: int = 0
    message: str = ""


def _make(req: BuildRequest, *targets: str) -> List[str]:
    cmd = ["make", "-C", str(req.src), f"O={req.obj}", f"-j{req.jobs}"]
    if req.use_ccache and shutil.which("ccache"):
        cmd.append("CC=ccache gcc")
    return cmd + list(targets)


def _env(req: BuildRequest) -> dict:
    env = dict(os.environ)
    env.update(BUILD_ENV)
    env["CCACHE_BASEDIR"] = str(req.src.parent)
    return env


def tree_state(src: Path) -> bytes:
    """What the kernel is built from: HEAD and every uncommitted edit.

    Edits to tracked files (staged or not) are in `git diff HEAD`; files
    git does not track and does not ignore count with their contents. (The
    kernel tree's top-level .gitignore ignores everything: a new file counts
    once it is added with `git add -f`.)"""
    def git(*args: str) -> bytes:
        return subprocess.run(["git", *args], cwd=src, capture_output=True,
                              check=False).stdout

    h = hashlib.sha256(git("rev-parse", "HEAD"))
    h.update(git("diff", "HEAD", "--binary"))
    for name in sorted(git("ls-files", "--others", "--exclude-standard", "-z").split(b"\0")):
        if name:
            h.update(name + b"\0")
            try:
                h.update(hashlib.sha256((src / name.decode()).read_bytes()).digest())
            except OSError:
                pass
    return h.digest()


def config_id(req: BuildRequest) -> str:
    """Identity of a build: the fragment and the source tree as it is now,
    so that an uncommitted edit in build/src is never run as a stale kernel."""
    h = hashlib.sha256(req.fragment.read_bytes())
    h.update(tree_state(req.src))
    return h.hexdigest()[:16]


def configure(req: BuildRequest, verify: bool = True) -> BuildResult:
    """defconfig + kvm_guest.config + our fragment, then verify the fragment.

    verify=False is for building points of the series where options of the
    fragment do not exist yet.
    """
    start = time.monotonic()
    req.obj.mkdir(parents=True, exist_ok=True)
    try:
        frag = config.parse(req.fragment.read_text())
    except (OSError, config.ConfigParseError) as e:
        return BuildResult(Status.CONFIG_FAILURE, 0.0, message=f"{req.fragment}: {e}")
    steps = [
        _make(req, *BASE_CONFIGS),
        [str(req.src / "scripts/kconfig/merge_config.sh"), "-m", "-O", str(req.obj),
         str(req.obj / ".config"), str(req.fragment)],
        _make(req, "olddefconfig"),
    ]
    for cmd in steps:
        printer.command(cmd)
        r = subprocess.run(cmd, cwd=req.src, env=_env(req), capture_output=True, text=True)
        if r.returncode != 0:
            return BuildResult(Status.CONFIG_FAILURE, time.monotonic() - start,
                               message=(r.stdout + r.stderr).strip()[-2000:])
    dot = config.parse((req.obj / ".config").read_text(), strict=False)
    bad = config.verify(frag, dot) if verify else []
    if bad:
        return BuildResult(
            Status.CONFIG_FAILURE, time.monotonic() - start,
            message="these options of the fragment did not take effect after olddefconfig:\n"
                    + config.describe(bad)
                    + "\n  (an unmet dependency or a 'select' from another option; see "
                    f"make -C {req.src} O={req.obj} menuconfig, '/' to search)")
    return BuildResult(Status.SUCCESS, time.monotonic() - start)


_COMPILE = re.compile(r"^\s+(CC|AS)\s")
_ERROR = re.compile(r"(error:|Error \d|\*\*\*)")


def _total_file(req: BuildRequest) -> Path:
    return req.obj / ".xpfo-compile-count"


def build(req: BuildRequest) -> BuildResult:
    """make bzImage with a progress line; the stamp is written only on success."""
    stamp = req.obj / ".xpfo-build-ok"
    stamp.unlink(missing_ok=True)
    ident = config_id(req)   # the tree as make sees it, not as it is after
    total = DEFAULT_TOTAL
    tf = _total_file(req)
    if tf.exists():
        try:
            total = max(int(tf.read_text().strip()), 1)
        except ValueError:
            pass
    clean = not (req.obj / "vmlinux.o").exists()
    cmd = _make(req, "bzImage")
    printer.command(cmd)
    prog = printer.Progress("build", every=15.0)
    compiled = 0
    tail: List[str] = []
    log = req.obj / "build.log"
    with open(log, "w") as logf:
        proc = subprocess.Popen(cmd, cwd=req.src, env=_env(req), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            logf.write(line)
            if _COMPILE.match(line):
                compiled += 1
                pct = min(99, 100 * compiled // total)
                prog.update(f"{compiled} of ~{total} files compiled, ~{pct}%")
            if _ERROR.search(line):
                tail.append(line.rstrip())
        rc = proc.wait()
    elapsed = prog.elapsed()
    kernel = req.obj / "arch/x86/boot/bzImage"
    if rc != 0 or not kernel.exists():
        errs = "\n".join(tail[-20:]) or f"make exited with {rc}; see {log}"
        return BuildResult(Status.BUILD_FAILURE, elapsed, compiled=compiled,
                           message=f"{errs}\n  full log: {log}")
    if clean:
        tf.write_text(f"{max(compiled, 1)}\n")
    stamp.write_text(ident + "\n")
    printer.info("build", f"done: {compiled} files compiled in {printer.fmt_elapsed(elapsed)}")
    return BuildResult(Status.SUCCESS, elapsed, kernel=kernel, compiled=compiled)


@contextlib.contextmanager
def lock(req: BuildRequest) -> Iterator[None]:
    """Hold the build directory's lock (flock on build/.xpfo-build.lock):
    one build of the kernel and the initramfs at a time."""
    req.obj.parent.mkdir(parents=True, exist_ok=True)
    with open(req.obj.parent / ".xpfo-build.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            printer.info("build", "another ./xpfo is building; waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def is_current(req: BuildRequest) -> bool:
    stamp = req.obj / ".xpfo-build-ok"
    return (stamp.exists() and stamp.read_text().strip() == config_id(req)
            and (req.obj / "arch/x86/boot/bzImage").exists())


def vanilla_request(layout: Layout = LAYOUT, jobs: Optional[int] = None) -> BuildRequest:
    """The base without the series, same configuration minus the series' options.

    It is the reference that shows what xpfo=off costs: a git worktree of
    build/src at the base tag, built into build/vanilla-obj.
    """
    src = layout.build / "vanilla-src"
    if not (src / ".git").exists():
        subprocess.run(["git", "worktree", "prune"], cwd=layout.src, check=False)
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(src), source.BASE_TAG],
                       cwd=layout.src, check=True, capture_output=True)
    frag = layout.build / "vanilla.fragment"
    lines = [line for line in layout.fragment.read_text().splitlines(keepends=True)
             if "XPFO" not in line]
    frag.write_text("".join(lines))
    n = jobs or (os.cpu_count() or 1) + 1
    return BuildRequest(src=src, obj=layout.build / "vanilla-obj", fragment=frag, jobs=n)


def request(layout: Layout = LAYOUT, jobs: Optional[int] = None,
            ccache: bool = True) -> BuildRequest:
    n = jobs or (os.cpu_count() or 1) + 1
    return BuildRequest(src=layout.src, obj=layout.obj, fragment=layout.fragment,
                        jobs=n, use_ccache=ccache)


def ensure_kernel(jobs: Optional[int] = None, force_build: bool = False,
                  layout: Layout = LAYOUT) -> None:
    """deps -> source -> config -> build -> initramfs, each skipped when current."""
    deps.ensure(quiet=True)
    source.prepare(layout)
    req = request(layout, jobs=jobs)
    # a second ./xpfo started while one builds waits for it, then boots
    # what it built, rather than running make over the same objects
    with lock(req):
        if force_build or not is_current(req):
            r = configure(req)
            if r.status is not Status.SUCCESS:
                raise HarnessError(f"kernel config failed: {r.message}")
            r = build(req)
            if r.status is not Status.SUCCESS:
                raise HarnessError(f"kernel build failed:\n{r.message}",
                                   "fix the series in build/src, then ./xpfo build")
        initramfs.build(layout)


def ensure_vanilla(jobs: Optional[int] = None, force: bool = False,
                   layout: Layout = LAYOUT) -> Path:
    """The kernel without the series, for the 'vanilla' benchmark mode."""
    source.prepare(layout)
    req = vanilla_request(layout, jobs=jobs)
    if force or not is_current(req):
        for step in (configure, build):
            r = step(req)
            if r.status is not Status.SUCCESS:
                raise HarnessError(f"vanilla kernel {r.status.value}: {r.message}")
    return req.obj / "arch/x86/boot/bzImage"


def given_image(path: str, layout: Layout = LAYOUT) -> Path:
    """A kernel image named on the command line, booted as it is: nothing
    is built but the initramfs, when stale."""
    kernel = Path(path).resolve()
    if not kernel.is_file():
        raise HarnessError(f"no such kernel image: {kernel}")
    initramfs.build(layout)
    return kernel


def check_config(jobs: Optional[int] = None, layout: Layout = LAYOUT) -> Path:
    """`./xpfo config`: generate the kernel .config and verify that every
    option of the fragment took effect; its path."""
    source.prepare(layout)
    r = configure(request(layout, jobs=jobs))
    if r.status is not Status.SUCCESS:
        raise HarnessError(f"kernel config failed: {r.message}")
    return layout.obj / ".config"
