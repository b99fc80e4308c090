"""Upstream's mm selftests (tools/testing/selftests/mm) as a peer suite.

Stages, each data in and data out:

- build(): the tree's selftests, linked statically against the tree's own
  uapi headers (make headers into build/selftests/hdr). The sources are
  copied into build/selftests/tree first: the selftests' Makefile writes its
  library probe (local_config.h) next to its sources, and build/src is never
  written. Redone only when the copied sources or the headers changed. A
  program that does not build is listed, not fatal.
- archive(): the programs and the run list as a second cpio appended to the
  runner's initramfs (build/selftests/initramfs.cpio); the default initramfs
  stays small.
- run_mode(): boots the kernel once per mode; the guest step
  guest/steps/selftests runs each program with a deadline (swap on the
  scratch disk, for the MADV_PAGEOUT cases), its output on the
  console between SELFTEST-BEGIN and SELFTEST-END (exit status, seconds). A kernel crash ends the
  guest: the next boot goes on after the program that was running.
- parse()/compare()/table(): pure; per program the kselftest totals (or the
  KTAP lines, or the exit status of a program that prints neither), the
  kernel reports during it, and the difference from xpfo=off.
"""

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from . import console, deps, guest, initramfs, machines, printer, qemu, source
from . import modes as modes_
from .errors import HarnessError
from .paths import LAYOUT, Layout, write_json

STEP = "selftests"
MM = "tools/testing/selftests/mm"
# What the mm selftests include from the tree besides their own directory.
TREE_PATHS = [
    "tools/testing/selftests/lib.mk",
    "tools/testing/selftests/kselftest.h",
    "tools/testing/selftests/kselftest_harness.h",
    "tools/testing/selftests/kselftest",
    "tools/testing/selftests/x86",
    MM,
    "tools/include",
    "tools/scripts",
    "mm/gup_test.h",
    "lib/test_hmm_uapi.h",
    "include/vdso",
]
# The uapi headers: a change here rebuilds the programs.
HEADER_PATHS = ["include/uapi", "arch/x86/include/uapi", "scripts/headers_install.sh"]
KSFT_SKIP = 4
BASE_HUGEPAGES = 128   # 2 MiB pages kept reserved, as run_vmtests.sh asks for
GUEST_MEM_MB = 2048


@dataclass(frozen=True)
class Program:
    """One invocation, as run_vmtests.sh makes it (args shrunk where TCG is slow)."""

    id: str
    argv: Tuple[str, ...]
    timeout: int = 300
    hugepages: int = BASE_HUGEPAGES

    @property
    def binary(self) -> str:
        return self.argv[0]


def _p(id: str, *argv: str, timeout: int = 300, hugepages: int = BASE_HUGEPAGES) -> Program:
    return Program(id, tuple(argv) or (id,), timeout, hugepages)


# run_vmtests.sh's order. Each id is the program, or program:variant.
PROGRAMS: List[Program] = [
    _p("hugepage-mmap"),
    _p("hugepage-shm"),
    _p("map_hugetlb"),
    _p("hugepage-mremap"),
    _p("hugepage-vmemmap"),
    _p("hugetlb-madvise"),
    _p("hugetlb_dio"),
    # 10000 rounds of two racing threads: 83-109 s under TCG where they
    # finished (2026-12-07), past 120 s in some boots; cut at 240 s
    _p("hugetlb_fault_after_madv", hugepages=1, timeout=240),
    _p("hugetlb_madv_vs_map", hugepages=1),
    _p("map_fixed_noreplace"),
    _p("gup_test:u", "gup_test", "-u"),
    _p("gup_test:a", "gup_test", "-a"),
    _p("gup_test:ct", "gup_test", "-ct", "-F", "0x1", "0", "19", "0x1000"),
    _p("gup_longterm"),
    _p("uffd-unit-tests"),
    _p("uffd-stress:anon", "uffd-stress", "anon", "20", "16"),
    # run_vmtests.sh passes half the free huge pages and 32 bounces; TCG
    # is slower than hardware by two orders of magnitude.
    _p("uffd-stress:hugetlb", "uffd-stress", "hugetlb", "32", "8"),
    _p("uffd-stress:hugetlb-private", "uffd-stress", "hugetlb-private", "32", "8"),
    _p("uffd-stress:shmem", "uffd-stress", "shmem", "20", "16"),
    _p("uffd-stress:shmem-private", "uffd-stress", "shmem-private", "20", "16"),
    _p("compaction_test", hugepages=0),
    _p("map_populate"),
    _p("mlock-random-test"),
    _p("mlock2-tests"),
    _p("mrelease_test"),
    _p("mremap_test"),
    _p("thuge-gen"),
    _p("hugetlb-soft-offline", hugepages=8),
    _p("hugetlb-read-hwpoison"),
    _p("virtual_address_range"),
    _p("mremap_dontunmap"),
    _p("madv_populate"),
    _p("memfd_secret"),
    _p("ksm_tests:H", "ksm_tests", "-H", "-s", "100"),
    _p("ksm_tests:P", "ksm_tests", "-P", "-s", "100"),
    _p("ksm_tests:M", "ksm_tests", "-M", "-p", "10"),
    _p("ksm_tests:U", "ksm_tests", "-U"),
    _p("ksm_tests:Z0", "ksm_tests", "-Z", "-p", "10", "-z", "0"),
    _p("ksm_tests:Z1", "ksm_tests", "-Z", "-p", "10", "-z", "1"),
    _p("ksm_functional_tests"),
    _p("protection_keys_64"),
    _p("pkey_sighandler_tests_64"),
    _p("soft-dirty"),
    _p("pagemap_ioctl"),
    _p("cow", timeout=600),
    _p("khugepaged"),
    _p("khugepaged:s2", "khugepaged", "-s", "2"),
    _p("transhuge-stress", "transhuge-stress", "-d", "20"),
    # pagecache cases drop the caches each: about 30 s apiece under TCG.
    # The THP shrinker's underused-THP scan and a split's zero-page check
    # compare subpages with the zero page (pages_identical(), a kmap of
    # each): 37.8 million kmaps of user frames over the program.
    # With XPFO and pgtprot=batched each is a write window, two IA32_PKRS
    # writes, and QEMU flushes its whole soft TLB on each: the program took
    # 1094 s in strict+pgt-batched against 128 s in strict on 2026-11-26
    # (same kmap count), hence the limit.
    _p("split_huge_page_test", timeout=1500),
    _p("migration"),
    _p("mkdirty"),
    _p("mdwe_test"),
    _p("droppable"),
    _p("mseal_test"),
    _p("seal_elf"),
]

# Built by upstream's Makefile but not run, and why.
NOT_RUN = {
    "hmm-tests": "needs the test_hmm module, loaded by test_hmm.sh (bash)",
    "on-fault-limit": "run_vmtests.sh runs it as user nobody (sudo); root has no memlock limit",
    "va_high_addr_switch": "driven by va_high_addr_switch.sh (bash)",
    "write_to_hugetlbfs": "a helper of charge_reserved_hugetlb.sh (bash, cgroup v2)",
    "protection_keys_32": "32-bit: no static i386 libc on the host",
    "pkey_sighandler_tests_32": "32-bit: no static i386 libc on the host",
}


# ---------------------------------------------------------------- build

@dataclass(frozen=True)
class BuildRequest:
    src: Path
    workdir: Path
    jobs: int = 2

    @property
    def tree(self) -> Path:
        return self.workdir / "tree"

    @property
    def hdr(self) -> Path:
        return self.workdir / "hdr"

    @property
    def bindir(self) -> Path:
        return self.workdir / "bin"

    @property
    def stamp(self) -> Path:
        return self.workdir / "build.json"

    @property
    def log(self) -> Path:
        return self.workdir / "build.log"


@dataclass
class BuildResult:
    built: List[str]
    failed: Dict[str, str]       # program -> first error line
    stamp: str
    elapsed: float = 0.0
    cached: bool = False


def build_request(layout: Layout = LAYOUT, jobs: Optional[int] = None) -> BuildRequest:
    return BuildRequest(src=layout.src, workdir=layout.build / "selftests",
                        jobs=jobs or os.cpu_count() or 2)


def _tree_digest(src: Path, paths: Sequence[str]) -> str:
    """Content hash of the files under `paths` (names, modes and bytes)."""
    h = hashlib.sha256()
    for rel in paths:
        root = src / rel
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            h.update(str(f.relative_to(src)).encode() + b"\0")
            h.update(f.read_bytes())
    return h.hexdigest()


def _run(cmd: List[str], log, cwd: Optional[Path] = None) -> int:
    printer.command(cmd, cwd=str(cwd) if cwd else None)
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    return subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT).returncode


_CC_ERROR = re.compile(r"^(?:[\w./-]*/)?([\w-]+)\.c:\d+(?::\d+)?: (?:fatal )?error: (.*)$")
_LD_ERROR = re.compile(r"/([\w-]+): (?:undefined reference|.*cannot find) (.*)$")


def expected_programs() -> List[str]:
    names = {p.binary for p in PROGRAMS} | set(NOT_RUN)
    return sorted(names)


def build_failures(log_text: str, missing: Sequence[str]) -> Dict[str, str]:
    """The first compiler or linker error per missing program, from make's output."""
    first: Dict[str, str] = {}
    for line in log_text.splitlines():
        m = _CC_ERROR.match(line) or _LD_ERROR.search(line)
        if m and m.group(1) not in first:
            first[m.group(1)] = m.group(2).strip()
    out = {}
    for name in missing:
        base = re.sub(r"_(32|64)$", "", name)
        out[name] = (first.get(name) or first.get(base)
                     or "not built (see build/selftests/build.log)")
    return out


def build(req: BuildRequest, force: bool = False) -> BuildResult:
    if not (req.src / MM / "Makefile").exists():
        raise HarnessError(f"no {MM} in {req.src}", "run ./xpfo source")
    deps.ensure(quiet=True, packages=deps.SELFTEST_PACKAGES)
    stamp = _tree_digest(req.src, TREE_PATHS + HEADER_PATHS)
    if not force and req.stamp.exists():
        try:
            old = json.loads(req.stamp.read_text())
        except ValueError:
            old = {}
        if old.get("stamp") == stamp and all((req.bindir / b).exists() for b in old["built"]):
            return BuildResult(old["built"], old["failed"], stamp, old.get("elapsed", 0.0),
                               cached=True)
    start = time.monotonic()
    req.workdir.mkdir(parents=True, exist_ok=True)
    req.stamp.unlink(missing_ok=True)
    shutil.rmtree(req.tree, ignore_errors=True)
    shutil.rmtree(req.bindir, ignore_errors=True)
    for rel in TREE_PATHS:
        s, d = req.src / rel, req.tree / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_dir():
            shutil.copytree(s, d, symlinks=True)
        elif s.exists():
            shutil.copy2(s, d)
    req.bindir.mkdir(parents=True)
    with open(req.log, "w") as log:
        # The tree's own uapi headers, built out of tree: build/src is not written.
        rc = _run(["make", "-C", str(req.src), f"O={req.hdr}", "-s", "headers"], log)
        if rc != 0:
            raise HarnessError(f"make headers failed (exit {rc}), see {req.log}")
        rc = _run(["make", "-C", str(req.tree / MM), "-k", f"-j{req.jobs}",
                   f"OUTPUT={req.bindir}", f"KHDR_INCLUDES=-isystem {req.hdr}/usr/include",
                   "EXTRA_CFLAGS=-static"], log)
    built = sorted(p.name for p in req.bindir.iterdir()
                   if p.is_file() and os.access(p, os.X_OK) and p.suffix not in (".sh", ".o"))
    missing = [n for n in expected_programs() if n not in built]
    failed = build_failures(req.log.read_text(errors="replace"), missing)
    res = BuildResult(built, failed, stamp, time.monotonic() - start)
    tmp = req.stamp.with_suffix(".tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(res), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, req.stamp)
    return res


# ---------------------------------------------------------------- guest

def runnable(built: Sequence[str]) -> List[Program]:
    return [p for p in PROGRAMS if p.binary in built]


def select(programs: Sequence[Program], only: Sequence[str]) -> List[Program]:
    """The programs whose ids are in `only` (all of them if it is empty)."""
    if not only:
        return list(programs)
    known = {p.id for p in programs}
    unknown = [i for i in only if i not in known]
    if unknown:
        raise HarnessError(f"unknown or unbuilt selftest program {unknown[0]!r}",
                           "ids: " + ", ".join(sorted(known)))
    return [p for p in programs if p.id in only]


def run_list(programs: Sequence[Program]) -> str:
    """The guest's list: one program a line, `id timeout hugepages argv...`."""
    return "".join(f"{p.id} {p.timeout} {p.hugepages} {' '.join(p.argv)}\n" for p in programs)


def archive(req: BuildRequest, programs: Sequence[Program], layout: Layout = LAYOUT) -> Path:
    """The runner's initramfs with the programs appended as a second cpio."""
    base = initramfs.build(layout)
    target = req.workdir / "initramfs.cpio"
    tmp = target.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(base.read_bytes())
        w = initramfs.Newc(f)
        for d in ("xh/selftests", "xh/selftests/bin"):
            w.add(initramfs.Entry(d, stat.S_IFDIR | 0o755))
        w.add(initramfs.Entry("xh/selftests/list", stat.S_IFREG | 0o644,
                              run_list(programs).encode()))
        for name in sorted({p.binary for p in programs}):
            w.add(initramfs.Entry(f"xh/selftests/bin/{name}", stat.S_IFREG | 0o755,
                                  (req.bindir / name).read_bytes()))
        w.close()
    os.replace(tmp, target)
    return target


def run_mode(mode: str, programs: Sequence[Program], initrd: Path, kernel: Optional[Path],
             cpus: int, layout: Layout = LAYOUT, max_boots: int = 6,
             machine: str = machines.DEFAULT) -> dict:
    """Every program in one mode; after a crash, boot again past the culprit."""
    outcomes: List[str] = []
    logs: List[str] = []
    results = {p.id: ProgramResult(p.id) for p in programs}
    start = 0
    for boot in range(max_boots):
        if start >= len(programs):
            break
        deadline = sum(p.timeout + 10 for p in programs[start:]) + 180
        req = guest.GuestRequest(steps=["info", f"{STEP}:{start}"], cpus=cpus,
                                 mem_mb=GUEST_MEM_MB, params=modes_.params(mode),
                                 timeout=deadline, kernel=kernel, disk=True,
                                 machine=machine,
                                 label=f"selftests-{mode}" + (f"-{boot}" if boot else "")
                                 + ("" if machine == machines.DEFAULT else f"-{machine}"))
        m = dataclasses.replace(guest.machine(req, layout), initrd=initrd)
        log = guest.log_path(layout, req.label)
        printer.info("selftests", f"{modes_.label(mode)}: programs "
                     f"{start + 1}..{len(programs)}, "
                     f"{cpus} vCPUs; log {log}")
        r = qemu.run(m, deadline, log)
        outcomes.append(r.outcome.value)
        logs.append(str(r.log))
        seen = parse(r.console.lines, programs[start:])
        begun = [p for p in programs[start:] if seen[p.id].status != "not-run"]
        for p in begun:
            results[p.id] = seen[p.id]
        printer.info("selftests", f"{modes_.label(mode)}: {r.outcome.value} after "
                     f"{printer.fmt_elapsed(r.elapsed)}, {len(begun)} programs ran")
        if r.outcome is qemu.Outcome.POWERED_OFF or not begun:
            break
        if r.outcome is qemu.Outcome.TIMEOUT and results[begun[-1].id].status == "crashed":
            results[begun[-1].id].status = "timeout"
        printer.warn(f"{modes_.label(mode)}: guest {r.outcome.value} during {begun[-1].id}; "
                     "booting again past it")
        start = programs.index(begun[-1]) + 1
    return {"mode": mode, "outcomes": outcomes, "logs": logs,
            "programs": {pid: dataclasses.asdict(res) for pid, res in results.items()}}


# ---------------------------------------------------------------- parse

@dataclass
class ProgramResult:
    id: str
    status: str = "not-run"   # pass, fail, skip, timeout, crashed, not-run
    exit: Optional[int] = None
    secs: Optional[int] = None
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    xfail: int = 0
    xpass: int = 0
    errors: int = 0
    totals: bool = False       # counts from kselftest's Totals line
    incidents: List[str] = field(default_factory=list)
    finished: bool = False

    def counts(self) -> Tuple[int, int, int]:
        return (self.passed + self.xfail, self.failed + self.errors + self.xpass, self.skipped)


_BEGIN = re.compile(r"^SELFTEST-BEGIN (\S+)")
# (a program whose last line has no newline runs into the marker)
_END = re.compile(r"SELFTEST-END (\S+) (-?\d+) (\d+)\s*$")
# the runner's own lines: the step ended (or the runner did)
_STEP_OVER = re.compile(r"^(?:# )?XH-(?:STEP-END|DONE)\b"
                        r"|^(?:not )?ok \d+ selftests(?::\d+)?(?:\s|$)")
_TOTALS = re.compile(r"# Totals: pass:(\d+) fail:(\d+) xfail:(\d+) xpass:(\d+) "
                     r"skip:(\d+) error:(\d+)")
_TAP = re.compile(r"^(not ok|ok) \d+\b(.*)$")
_PLAN = re.compile(r"^1\.\.(\d+)\s*$")
# uffd-unit-tests prints neither KTAP nor Totals: "Testing <case>... done",
# "... skipped [reason: ...]", "... failed [reason: ...]", then a summary.
_UFFD_CASE = re.compile(r"^Testing .*\.\.\. ?(done|skipped|failed)\b")
_UFFD_SUMMARY = re.compile(r"^Userfaults unit tests: pass=(\d+), skip=(\d+), fail=(\d+)")


def _finish(res: ProgramResult, lines: List[str], result: Optional[dict],
            timeout: int) -> None:
    tap_pass = tap_fail = tap_skip = 0
    plan = 0
    uffd: Dict[str, int] = {}
    for line in lines:
        m = _UFFD_CASE.match(line)
        if m:
            uffd[m.group(1)] = uffd.get(m.group(1), 0) + 1
        m = _UFFD_SUMMARY.match(line)
        if m:
            res.passed, res.skipped, res.failed = map(int, m.groups())
            res.totals = True
        m = _PLAN.match(line)
        if m:
            plan = int(m.group(1))
        m = _TOTALS.search(line)
        if m:
            (res.passed, res.failed, res.xfail, res.xpass,
             res.skipped, res.errors) = map(int, m.groups())
            res.totals = True
        m = _TAP.match(line)
        if m:
            directive = m.group(2).split("#", 1)[1].strip().upper() if "#" in m.group(2) else ""
            if directive.startswith("SKIP"):
                tap_skip += 1
            elif m.group(1) == "ok":
                tap_pass += 1
            else:
                tap_fail += 1
    sub = console.parse(lines)
    res.incidents = [f"{i.kind}: {i.first_line}" for i in sub.incidents]
    if not res.totals and uffd and not (tap_pass or tap_fail or tap_skip):
        tap_pass, tap_skip, tap_fail = (uffd.get(k, 0) for k in ("done", "skipped", "failed"))
    if not res.totals:
        res.passed, res.failed, res.skipped = tap_pass, tap_fail, tap_skip
        # KTAP's plan: cases that never reported count as errors
        res.errors += max(plan - (tap_pass + tap_fail + tap_skip), 0)
    if result is None:
        # the guest died during the program
        res.status = "crashed"
        res.errors += 1
        return
    res.finished = True
    res.exit = result.get("exit")
    res.secs = result.get("secs")
    if res.exit is not None and res.exit >= 128 and (res.secs or 0) >= timeout:
        res.status = "timeout"
        res.errors += 1
    elif not res.totals and not (tap_pass or tap_fail or tap_skip):
        # no KTAP: the exit status is the one case
        if res.exit == 0:
            res.status, res.passed = "pass", 1
        elif res.exit == KSFT_SKIP:
            res.status, res.skipped = "skip", 1
        else:
            res.status, res.failed = "fail", 1
    else:
        if res.exit not in (0, KSFT_SKIP) and not (res.failed or res.errors or res.xpass):
            res.errors += 1   # died or failed without saying so in KTAP
        if res.failed or res.errors or res.xpass:
            res.status = "fail"
        elif res.passed or res.xfail:
            res.status = "pass"
        else:
            res.status = "skip"
    if res.incidents and res.status == "pass":
        res.status = "fail"


def parse(lines: Sequence[str], programs: Sequence[Program] = ()) -> Dict[str, ProgramResult]:
    """Per program, from the console lines of one or more boots (pure)."""
    timeouts = {p.id: p.timeout for p in programs}
    out: Dict[str, ProgramResult] = {p.id: ProgramResult(p.id) for p in programs}
    cur: Optional[str] = None
    buf: List[str] = []
    for raw in lines:
        line = console.strip(raw)
        m = _BEGIN.match(line)
        if m:
            if cur is not None:
                _finish(out[cur], buf, None, timeouts.get(cur, 0))
            cur, buf = m.group(1), []
            out[cur] = ProgramResult(cur)
            continue
        if cur is None:
            continue
        m = _END.search(line)
        if m and m.group(1) == cur:
            if m.start():
                buf.append(line[:m.start()])
            _finish(out[cur], buf, {"exit": int(m.group(2)), "secs": int(m.group(3))},
                    timeouts.get(cur, 0))
            cur, buf = None, []
            continue
        if _STEP_OVER.match(line):
            _finish(out[cur], buf, None, timeouts.get(cur, 0))
            cur, buf = None, []
            continue
        if line.startswith(("RESULT ", "XH-RESULT ", "XH-END ")):
            continue
        buf.append(line)
    if cur is not None:
        _finish(out[cur], buf, None, timeouts.get(cur, 0))
    return out


# ---------------------------------------------------------------- compare

def _res(d: dict) -> ProgramResult:
    return ProgramResult(**d)


def differences(modes: Dict[str, dict], base: str = "off") -> List[str]:
    """Every program whose outcome in a mode is not off's, and every kernel report."""
    out = []
    ref = modes.get(base, {}).get("programs", {})
    for mode, data in modes.items():
        for pid, d in data["programs"].items():
            r = _res(d)
            for inc in r.incidents:
                out.append(f"{modes_.label(mode)} {pid}: kernel report {inc}")
            if mode == base or pid not in ref:
                continue
            o = _res(ref[pid])
            if not same(r, o):
                out.append(f"{modes_.label(mode)} {pid}: {cell(r)} (off: {cell(o)})")
    return out


def same(r: ProgramResult, o: ProgramResult) -> bool:
    """The same outcome. Two runs cut at their deadline got as far as they
    did (cases their plan announced but never reported are errors): the same
    when neither has a failure the other has not."""
    if r.status == o.status == "timeout":
        return (r.failed, r.xpass) == (o.failed, o.xpass)
    return (r.status, r.counts()) == (o.status, o.counts())


def totals(data: dict) -> Dict[str, int]:
    t = {"pass": 0, "fail": 0, "skip": 0, "cases": 0, "programs": 0, "reports": 0}
    for d in data["programs"].values():
        p, f, s = _res(d).counts()
        t["pass"] += p
        t["fail"] += f
        t["skip"] += s
        t["cases"] += p + f + s
        t["programs"] += 1
        t["reports"] += len(d["incidents"])
    return t


def cell(r: ProgramResult) -> str:
    p, f, s = r.counts()
    text = f"{p}/{f}/{s}"
    if r.status in ("timeout", "crashed", "not-run"):
        text += f" {r.status.upper()}"
    if r.incidents:
        kinds = sorted({i.split(":", 1)[0] for i in r.incidents})
        text += " " + "+".join(k.upper() for k in kinds)
    return text


def table(modes: Dict[str, dict], base: str = "off") -> str:
    """Markdown: a row per program, pass/fail/skip per mode; ≠ where a mode is not off."""
    names = list(modes)
    ids: List[str] = []
    for data in modes.values():
        ids += [pid for pid in data["programs"] if pid not in ids]
    rows = ["| program | " + " | ".join(modes_.label(m) for m in names) + " |",
            "|---|" + "---|" * len(names)]
    ref = modes.get(base, {}).get("programs", {})
    for pid in ids:
        cells = []
        for m in names:
            d = modes[m]["programs"].get(pid)
            if d is None:
                cells.append("-")
                continue
            r = _res(d)
            text = cell(r)
            if m != base and pid in ref:
                o = _res(ref[pid])
                if not same(r, o) or r.incidents:
                    text = f"**{text} ≠**"
            elif r.incidents:
                text = f"**{text}**"
            cells.append(text)
        rows.append(f"| {pid} | " + " | ".join(cells) + " |")
    tot = {m: totals(modes[m]) for m in names}
    rows.append("| **cases pass/fail/skip** | " + " | ".join(
        f"{t['pass']}/{t['fail']}/{t['skip']} of {t['cases']}" for t in tot.values()) + " |")
    rows.append("| **skipped** | " + " | ".join(
        f"{100.0 * t['skip'] / max(t['cases'], 1):.1f}%" for t in tot.values()) + " |")
    rows.append("| **kernel reports** | " + " | ".join(
        str(t["reports"]) for t in tot.values()) + " |")
    return "\n".join(rows)


# ---------------------------------------------------------------- suite

def run_suite(modes: Sequence[str], cpus: int, kernel: Optional[Path], meta: dict,
              layout: Layout = LAYOUT, jobs: Optional[int] = None, parallel: int = 1,
              machine: str = machines.DEFAULT, only: Sequence[str] = ()) -> dict:
    """Build (when the tree changed), run every mode, compare with off.

    `parallel` guests at a time (each its own mode); keep it at most the
    host's cores divided by the guest's vCPUs."""
    # every mode is judged against off: it always runs
    modes = ["off"] + [m for m in modes if m != "off"]
    req = build_request(layout, jobs)
    b = build(req)
    printer.info("selftests", f"{len(b.built)} programs built"
                 f"{' (unchanged tree, cached)' if b.cached else ''}: {' '.join(b.built)}")
    for name, why in sorted(b.failed.items()):
        printer.warn(f"selftest {name} did not build: {why}")
    for name, why in sorted(NOT_RUN.items()):
        if name in b.built:
            printer.info("selftests", f"not run: {name}: {why}")
    programs = select(runnable(b.built), only)
    initrd = archive(req, programs, layout)
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
        futures = {mode: pool.submit(run_mode, mode, programs, initrd, kernel, cpus, layout,
                                     machine=machine)
                   for mode in modes}
        runs = {mode: f.result() for mode, f in futures.items()}
    return summarize(runs, dict(meta, elapsed=round(time.monotonic() - start), cpus=cpus,
                                mem_mb=GUEST_MEM_MB, parallel=parallel, machine=machine),
                     {"built": b.built, "failed": b.failed, "not_run": NOT_RUN,
                      "stamp": b.stamp})


def summarize(runs: Dict[str, dict], meta: dict, build_info: dict) -> dict:
    """Print the table and the differences; the suite's result as data."""
    diffs = differences(runs)
    crashed = [f"{modes_.label(m)}: guest {o}" for m, d in runs.items()
               for o in d["outcomes"] if o != qemu.Outcome.POWERED_OFF.value]
    text = table(runs)
    printer.raw("")
    printer.raw(text)
    printer.raw("")
    for m, d in runs.items():
        t = totals(d)
        printer.raw(f"{modes_.label(m)}: {t['programs']} programs, {t['cases']} cases: "
                    f"{t['pass']} "
                    f"passed, {t['fail']} failed, {t['skip']} skipped "
                    f"({100.0 * t['skip'] / max(t['cases'], 1):.1f}%), "
                    f"{t['reports']} kernel reports")
    for diff in diffs + crashed:
        printer.raw(f"DIFF {diff}")
    return {
        "meta": dict(meta, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())),
        "build": build_info,
        "modes": runs,
        "totals": {m: totals(d) for m, d in runs.items()},
        "differences": diffs,
        "guest_crashes": crashed,
        "table": text,
        "passed": not diffs,
    }


_LOG_NAME = re.compile(r"selftests-([a-z+-]+?)(?:-\d+)?\.log$")


def from_logs(logs: Sequence[Path]) -> Dict[str, dict]:
    """Per mode, the programs' results from saved guest logs (in boot order)."""
    runs: Dict[str, dict] = {}
    for log in logs:
        m = _LOG_NAME.search(log.name)
        if not m:
            raise HarnessError(f"not a selftests guest log: {log}",
                               "the names are ...-selftests-MODE[-BOOT].log")
        lines = log.read_text(errors="replace").splitlines()
        run = runs.setdefault(m.group(1), {"mode": m.group(1), "outcomes": [], "logs": [],
                                           "programs": {}})
        done = any(console.strip(x).lstrip("# ").startswith("XH-DONE") for x in lines)
        run["outcomes"].append(qemu.Outcome.POWERED_OFF.value if done
                               else qemu.Outcome.CRASHED.value)
        run["logs"].append(str(log))
        for pid, res in parse(lines, PROGRAMS).items():
            if res.status != "not-run" or pid not in run["programs"]:
                run["programs"][pid] = dataclasses.asdict(res)
    # what no log names was not built, or is not in this list
    ran = {pid for r in runs.values() for pid, d in r["programs"].items()
           if d["status"] != "not-run"}
    for r in runs.values():
        r["programs"] = {pid: d for pid, d in r["programs"].items() if pid in ran}
    return runs


def command_line(modes: Sequence[str], cpus: int, parallel: int = 1,
                 machine: str = machines.DEFAULT, programs: Sequence[str] = (),
                 kernel: Optional[str] = None) -> str:
    return ("./xpfo selftests --modes " + " ".join(modes) + f" --cpus {cpus}"
            + (f" --parallel {parallel}" if parallel > 1 else "")
            + ("" if machine == machines.DEFAULT else f" --machine {machine}")
            + (" --programs " + " ".join(programs) if programs else "")
            + (f" --kernel {kernel}" if kernel else ""))


def run_and_record(modes: Sequence[str], cpus: int, kernel: Optional[str] = None,
                   layout: Layout = LAYOUT, jobs: Optional[int] = None, parallel: int = 1,
                   machine: str = machines.DEFAULT, programs: Sequence[str] = ()) -> dict:
    """`./xpfo selftests`: run_suite, its result in out/selftests.json.
    `kernel`: an image to boot as it is, as named on the command line
    (default: the one built in build/, current)."""
    image: Optional[Path] = None
    if kernel:
        image = Path(kernel).resolve()
        if not image.is_file():
            raise HarnessError(f"no such kernel image: {kernel}")
    data = run_suite(modes, cpus, image, layout=layout, jobs=jobs, parallel=parallel,
                     machine=machine, only=programs, meta={
        "command": command_line(modes, cpus, parallel, machine, programs, kernel),
        "series_commit": "unknown (--kernel)" if image else source.head_commit(layout),
        "kernel_image": str(image or layout.bzimage)})
    out = layout.out / "selftests.json"
    write_json(out, data)
    printer.info("selftests", f"{'no difference from off' if data['passed'] else 'FAILED'}; "
                 f"results in {out}")
    return data


def rebuild(logs: Sequence[str], layout: Layout = LAYOUT) -> dict:
    """`./xpfo selftests --from-logs`: the table from saved guest logs, and
    out/selftests.json."""
    paths = [Path(p) for p in logs]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise HarnessError(f"no such log: {missing[0]}")
    data = summarize(from_logs(paths), {
        "command": "./xpfo selftests --from-logs " + " ".join(map(str, paths))}, {})
    write_json(layout.out / "selftests.json", data)
    return data
