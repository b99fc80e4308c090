"""`./xpfo profile`: where a workload's guest instructions go, per kernel
function, mode against mode.

Each mode boots the bench workload twice under `-icount`, with bench's quick
sizes and with its full ones, and a TCG plugin (plugin/insnprof.c) counts
the instructions executed per translation-block start address. The full
boot's counts minus the quick boot's leave the workload's extra size alone
(the boot, the runner and the workload's fixed set-up cancel), and divided
by the extra units the workload reports (its user pages) they are
instructions per unit, the figure `./xpfo bench --icount` reports for the
workload's timed part. Block addresses are named by the kernel's
System.map: the guest boots with `nokaslr`, so that they are the map's.

Stages, data in and data out: the plugin (built, then tried on QEMU), the
boots (bench's own boot of a cell, with the plugin and `nokaslr` added),
the symbolizer (SymbolMap, locate()), the subtraction (per_unit()), the
report (table()).
"""

import bisect
import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from . import bench, modes, printer, qemu
from .errors import HarnessError
from .paths import LAYOUT, Layout, write_json

PLUGIN_SRC = Path(__file__).resolve().parent / "plugin" / "insnprof.c"
PLUGIN_CFLAGS = ["-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                 "-fvisibility=hidden", "-pthread"]
CC = "gcc"

# The modes a profile takes: every mode of the series' kernel (the vanilla
# kernel is another image, with a System.map of its own).
MODES = tuple(m for m in bench.ALL_MODES if m != bench.VANILLA)
DEFAULT_MODES = ("off", "strict")
# The workloads whose quick and full steps differ in size (the build's
# differ in their disk image only, and report no user pages).
WORKLOADS = tuple(n for q, f in zip(bench.QUICK, bench.FULL)
                  if q.step != f.step for n in f.reports)
DEFAULT_WORKLOAD = "page_fault"
SIZES = ("quick", "full")

# Buckets for what is not a function of the kernel image's text.
USER = "(user space)"
OUTSIDE = "(kernel, outside the image's text)"
USER_TOP = 1 << 47          # canonical lower half: user addresses
KASLR_ALIGN = 2 << 20       # the kernel image moves in 2 MiB steps
KASLR_MAX = 1 << 30         # within 1 GiB (CONFIG_RANDOMIZE_BASE_MAX_OFFSET)
# locate(): of the hottest functions, how many must have a block starting
# at their entry for the map to be the running kernel's (a right map: all
# or nearly all of them; a wrong one, or a wrong offset: under a fifth)
ENTRY_CHECK = 100
ENTRY_MIN = 0.6


# --- the plugin -------------------------------------------------------------

def plugin_path(layout: Layout = LAYOUT) -> Path:
    return layout.out / "plugin" / "insnprof.so"


def build_plugin(layout: Layout = LAYOUT, src: Path = PLUGIN_SRC) -> Path:
    """The plugin's shared object, compiled when missing or older than its
    source; compiled to a temporary name and renamed, so that a failed or
    interrupted compile leaves nothing a later run would take."""
    so = plugin_path(layout)
    if so.exists() and so.stat().st_mtime >= src.stat().st_mtime:
        return so
    if shutil.which(CC) is None:
        raise HarnessError(f"{CC} not found: it compiles the profiling plugin {src.name}",
                           "run ./xpfo setup (installs gcc)")
    so.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".insnprof-", suffix=".so.tmp", dir=so.parent)
    os.close(fd)
    tmp = Path(name)
    cmd = [CC, *PLUGIN_CFLAGS, "-o", str(tmp), str(src)]
    printer.command(cmd)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise HarnessError(f"the profiling plugin {src.name} does not compile:\n"
                               f"{r.stderr.strip()}")
        os.replace(tmp, so)
    finally:
        tmp.unlink(missing_ok=True)
    return so


def check_plugin(so: Path) -> None:
    """Load the plugin into a QEMU without a machine and quit at once: a
    QEMU built without plugin support, or one that refuses the plugin's API
    version, fails here with QEMU's own words, before any boot."""
    qemu.check_qemu()
    with tempfile.TemporaryDirectory(prefix="xpfo-insnprof-") as d:
        out = Path(d) / "counts.txt"
        cmd = [qemu.QEMU, "-M", "none", "-nodefaults", "-display", "none",
               "-monitor", "stdio", "-plugin", qemu.plugin_arg(so, out=str(out))]
        try:
            r = subprocess.run(cmd, input="quit\n", capture_output=True, text=True,
                               timeout=60)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"{qemu.QEMU} did not quit within 60 s with the profiling "
                               "plugin loaded", "run the command above by hand") from None
        last = next((x.strip() for x in reversed((r.stderr + r.stdout).splitlines())
                     if x.strip()), "")
        if r.returncode != 0:
            printer.command(cmd)
            raise HarnessError(f"{qemu.QEMU} refused the profiling plugin: {last}",
                               "it needs a QEMU built with TCG plugin support "
                               "(--enable-plugins, as Debian's is) that takes plugin API "
                               "version 1 (QEMU 7.2; see harness/plugin/insnprof.c)")
        if not out.exists():
            printer.command(cmd)
            raise HarnessError(f"the profiling plugin wrote nothing at {qemu.QEMU}'s exit"
                               + (f": {last}" if last else ""))


# --- the symbolizer ---------------------------------------------------------

# Section markers that share an address with a function: never its name.
MARKERS = {"_text", "_stext", "_etext", "_sinittext", "_einittext"}


def _marker(name: str) -> bool:
    return name in MARKERS or (name.startswith("__") and name.endswith(("_start", "_end")))


@dataclass(frozen=True)
class SymbolMap:
    """The kernel image's text symbols, sorted by address (one name per
    address: the first in System.map that is not a section marker), and
    the ranges of the image's text."""

    addrs: Tuple[int, ...]
    names: Tuple[str, ...]
    text: Tuple[Tuple[int, int], ...]   # [start, end) of .text and .init.text

    @classmethod
    def parse(cls, lines: Iterable[str], source: str = "System.map") -> "SymbolMap":
        at: Dict[int, str] = {}
        marks: Dict[str, int] = {}
        for line in lines:
            parts = line.split()
            if len(parts) < 3 or parts[1] not in ("t", "T", "w", "W"):
                continue
            try:
                addr = int(parts[0], 16)
            except ValueError:
                continue
            name = parts[2]
            if name in MARKERS:
                marks[name] = addr
            if addr not in at or (_marker(at[addr]) and not _marker(name)):
                at[addr] = name
        if "_stext" not in marks or "_etext" not in marks:
            raise HarnessError(f"{source} is not a kernel System.map: no _stext/_etext "
                               "text symbols")
        text = [(marks["_stext"], marks["_etext"])]
        if "_sinittext" in marks and "_einittext" in marks:
            text.append((marks["_sinittext"], marks["_einittext"]))
        addrs = tuple(sorted(at))
        return cls(addrs, tuple(at[a] for a in addrs), tuple(text))

    @classmethod
    def load(cls, path: Path) -> "SymbolMap":
        try:
            with open(path, errors="replace") as f:
                return cls.parse(f, str(path))
        except OSError as e:
            raise HarnessError(f"cannot read {path}: {e.strerror}") from None

    def in_text(self, addr: int) -> bool:
        return any(lo <= addr < hi for lo, hi in self.text)

    def name(self, vaddr: int, offset: int = 0) -> str:
        """The function a guest address is in: the map's address is the
        guest's minus the kernel's KASLR offset."""
        if vaddr < USER_TOP:
            return USER
        addr = vaddr - offset
        i = bisect.bisect_right(self.addrs, addr) - 1
        if i < 0 or not self.in_text(addr):
            return OUTSIDE
        return self.names[i]

    def is_entry(self, addr: int) -> bool:
        i = bisect.bisect_left(self.addrs, addr)
        return i < len(self.addrs) and self.addrs[i] == addr


def by_function(counts: Mapping[int, int], syms: SymbolMap, offset: int = 0) -> Counter:
    """Instructions per function (and per bucket: user space, the kernel
    outside its image's text) of a boot's block counts."""
    out: Counter = Counter()
    for vaddr, n in counts.items():
        out[syms.name(vaddr, offset)] += n
    return out


def entry_share(counts: Mapping[int, int], syms: SymbolMap, offset: int) -> float:
    """Of the ENTRY_CHECK functions that ran the most instructions, the
    share with a block that starts at their entry. Nearly every function
    that runs is entered at its first instruction, so with the right map
    and offset this is close to 1; a map of another build, or a wrong
    offset, puts the names beside the blocks and the share falls under a
    fifth."""
    per: Counter = Counter()
    entered = set()
    for vaddr, n in counts.items():
        if vaddr < USER_TOP:
            continue
        addr = vaddr - offset
        if not syms.in_text(addr):
            continue
        i = bisect.bisect_right(syms.addrs, addr) - 1
        if i < 0:
            continue
        per[i] += n
        if syms.addrs[i] == addr:
            entered.add(i)
    top = [i for i, _ in per.most_common(ENTRY_CHECK)]
    return sum(1 for i in top if i in entered) / len(top) if top else 0.0


def locate(counts: Mapping[int, int], syms: SymbolMap, source: str = "System.map") -> int:
    """The kernel's offset from its System.map: 0 when it ran where the map
    says (booted with nokaslr); else the 2 MiB step of KASLR's range at
    which the most blocks start on a function's entry. The map must fit:
    a map of another build fails here rather than name the wrong functions."""
    if entry_share(counts, syms, 0) >= ENTRY_MIN:
        return 0
    kernel = [v for v in counts if v >= USER_TOP]
    entries = set(syms.addrs)

    def hits(off: int) -> int:
        return sum(1 for v in kernel if v - off in entries)

    best = max(range(0, KASLR_MAX, KASLR_ALIGN), key=hits)
    share = entry_share(counts, syms, best)
    if share < ENTRY_MIN:
        raise HarnessError(f"{source} does not match the kernel that ran: of its "
                           f"{ENTRY_CHECK} hottest functions only {share:.0%} were entered "
                           "at their first instruction (at the best offset, "
                           f"{best:#x})", "give the System.map of the same build as the "
                           "bzImage (--system-map)")
    return best


def read_counts(path: Path) -> Dict[int, int]:
    """The plugin's output: 'ADDRESS COUNT' lines, hex and decimal."""
    counts: Dict[int, int] = {}
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                parts = line.split()
                try:
                    addr, cnt = int(parts[0], 16), int(parts[1])
                except (IndexError, ValueError):
                    raise HarnessError(f"{path}:{n}: not an 'ADDRESS COUNT' line: "
                                       f"{line.strip()!r}") from None
                counts[addr] = counts.get(addr, 0) + cnt
    except FileNotFoundError:
        raise HarnessError(f"the profiling plugin wrote no counts ({path})",
                           "QEMU's output is in the guest's log") from None
    return counts


# --- the subtraction --------------------------------------------------------

@dataclass(frozen=True)
class BootProfile:
    """One profiled boot: instructions per function, the workload's units
    and its timed part's instructions."""

    size: str                   # "quick" or "full"
    functions: Mapping[str, int]
    units: int                  # the user pages the workload reports
    timed: float                # instructions of its timed part (bench's figure)
    offset: int = 0
    log: str = ""


@dataclass(frozen=True)
class ModeProfile:
    """A mode's profile: instructions per unit of the workload, per
    function, from the full boot minus the quick one."""

    mode: str
    per_unit: Mapping[str, float]
    units: Tuple[int, int]      # quick, full
    timed_per_unit: float       # the full boot's timed part per unit

    @property
    def total(self) -> float:
        return sum(self.per_unit.values())


def per_unit(mode: str, quick: BootProfile, full: BootProfile) -> ModeProfile:
    extra = full.units - quick.units
    if extra <= 0:
        raise HarnessError(f"{mode}: the full run's {full.units} units are not more than "
                           f"the quick run's {quick.units}: nothing to divide by")
    names = set(full.functions) | set(quick.functions)
    diff = {n: (full.functions.get(n, 0) - quick.functions.get(n, 0)) / extra for n in names}
    return ModeProfile(mode, {n: v for n, v in diff.items() if v},
                       (quick.units, full.units), full.timed / full.units)


# --- the report -------------------------------------------------------------

def _rank(profiles: Sequence[ModeProfile]) -> List[str]:
    """Functions by how far they move from the first mode (the largest
    difference in any mode), or with one mode by their own count."""
    names = {n for p in profiles for n in p.per_unit}
    base = profiles[0].per_unit

    def key(n: str) -> Tuple[float, float, str]:
        diff = max((abs(p.per_unit.get(n, 0.0) - base.get(n, 0.0)) for p in profiles[1:]),
                   default=0.0)
        return (-diff, -max(abs(p.per_unit.get(n, 0.0)) for p in profiles), n)

    return sorted(names, key=key)


def _r(v: float, digits: int) -> float:
    """Rounded, and never -0 (a difference smaller than the last digit)."""
    return round(v, digits) + 0.0


def _cell(v: float, base: Optional[float] = None) -> str:
    return (f"{_r(v, 1):,.1f}" if base is None
            else f"{_r(v, 1):,.1f} ({_r(v - base, 1):+,.1f})")


def _name(n: str) -> str:
    return n if n in (USER, OUTSIDE) else f"`{n}`"


def totals_table(profiles: Sequence[ModeProfile], unit: str = "user page") -> str:
    base = profiles[0]
    head = ("| | " + " | ".join(modes.label(p.mode) for p in profiles) + " |\n"
            + "|---|" + "---|" * len(profiles) + "\n")

    def row(title: str, vals: Sequence[float], ratio: bool = True) -> str:
        cells = [f"{_r(vals[0], 0):,.0f}"] + [
            f"{_r(v, 0):,.0f} ({_r(v - vals[0], 0):+,.0f}"
            + (f", {v / vals[0]:.3f}x)" if ratio and vals[0] else ")")
            for v in vals[1:]]
        return f"| {title} | " + " | ".join(cells) + " |\n"

    def part(p: ModeProfile, which: str) -> float:
        if which == "text":
            return sum(v for n, v in p.per_unit.items() if n not in (USER, OUTSIDE))
        return p.per_unit.get(which, 0.0)

    units = ("| user pages, quick run / full run | "
             + " | ".join(f"{p.units[0]:,} / {p.units[1]:,}" for p in profiles) + " |\n")
    return (head + units
            + row(f"guest instructions per {unit}, full run minus quick run",
                  [p.total for p in profiles])
            + row("... in the kernel image's text", [part(p, "text") for p in profiles])
            + row(f"... in {USER[1:-1]}", [part(p, USER) for p in profiles], ratio=False)
            + row(f"... in the {OUTSIDE[1:-1]}", [part(p, OUTSIDE) for p in profiles],
                  ratio=False)
            + row(f"the workload's timed part per {unit}, full run (`./xpfo bench "
                  "--icount`'s figure)", [p.timed_per_unit for p in profiles])
            + (f"\nThe first total counts every guest instruction that grows with the "
               f"workload's size (user space, interrupts and the untimed part of its "
               f"set-up included); the last is the workload's own clock over its timed "
               f"part, as `./xpfo bench --icount` reports it. Differences and ratios are "
               f"against {modes.label(base.mode)}.\n"))


def table(profiles: Sequence[ModeProfile], top: int, unit: str = "user page") -> str:
    """Per function, guest instructions per unit in each mode and, for the
    modes after the first, the difference from it; the top rows by the
    difference, then the rest summed, then the total (the columns add up)."""
    ranked = _rank(profiles)
    shown, rest = ranked[:top], ranked[top:]
    base = profiles[0]
    cols = [modes.label(p.mode) for p in profiles]
    lines = ["| function | " + " | ".join(cols[:1] + [f"{c} (difference)" for c in cols[1:]])
             + " |", "|---|" + "---|" * len(profiles)]

    def row(title: str, vals: Sequence[float]) -> str:
        cells = [title, _cell(vals[0])] + [_cell(v, vals[0]) for v in vals[1:]]
        return "| " + " | ".join(cells) + " |"

    for n in shown:
        lines.append(row(_name(n), [p.per_unit.get(n, 0.0) for p in profiles]))
    if rest:
        lines.append(row(f"({len(rest)} other functions and buckets)",
                         [sum(p.per_unit.get(n, 0.0) for n in rest) for p in profiles]))
    lines.append(row("**total**", [p.total for p in profiles]))
    head = (f"Guest instructions per {unit}, per kernel function (a block counts for "
            f"the function it starts in), full run minus quick run; sorted by the "
            f"largest difference from {modes.label(base.mode)}"
            if len(profiles) > 1 else
            f"Guest instructions per {unit}, per kernel function (a block counts for "
            "the function it starts in), full run minus quick run; the most first")
    return head + f"; the top {len(shown)} of {len(ranked)}:\n\n" + "\n".join(lines) + "\n"


# --- the runs ---------------------------------------------------------------

@dataclass(frozen=True)
class ProfileRequest:
    modes: Sequence[str]
    workload: str
    cpus: int
    kernel: Optional[Path]      # None: the kernel built in build/
    system_map: Path
    top: int = 30


def system_map(kernel: Optional[str], given: Optional[str],
               layout: Layout = LAYOUT) -> Path:
    """The System.map to name the functions by: the one given; else for
    the kernel built in build/, build/obj/System.map; else the one beside
    the bzImage, or at the top of the build tree it was made in."""
    if given:
        path = Path(given).resolve()
        if not path.is_file():
            raise HarnessError(f"no such System.map: {path}")
        return path
    if kernel is None:
        path = layout.obj / "System.map"
        if path.is_file() or not layout.bzimage.exists():
            return path     # (a kernel still to build writes it)
        raise HarnessError(f"no System.map beside the built kernel: {path}",
                           "rebuild with ./xpfo build")
    image = Path(kernel).resolve()
    if not image.is_file():
        raise HarnessError(f"no such kernel image: {image}")
    candidates = [image.parent / "System.map"]
    if image.parent.parent.name == "x86" and image.parent.name == "boot":
        candidates.append(image.parents[3] / "System.map")    # tree/arch/x86/boot/bzImage
    for path in candidates:
        if path.is_file():
            return path
    raise HarnessError(f"no System.map beside {image} "
                       f"({' or '.join(str(c) for c in candidates)})",
                       "name the one of the same build with --system-map")


def command_line(req: ProfileRequest, kernel: Optional[str] = None,
                 given_map: Optional[str] = None) -> str:
    parts = ["./xpfo profile", "--modes", *req.modes, "--workload", req.workload,
             "--cpus", str(req.cpus)]
    if kernel:
        parts += ["--kernel", kernel]
    if given_map:
        parts += ["--system-map", given_map]
    if req.top != ProfileRequest.top:
        parts += ["--top", str(req.top)]
    return " ".join(parts)


def _boot(req: ProfileRequest, so: Path, syms: SymbolMap, mode: str, size: str,
          raw: Path) -> BootProfile:
    """One boot of bench's cell, with the plugin and nokaslr added."""
    breq = bench.BenchRequest(modes=[mode], cpus=[req.cpus], rounds=1, icount=True,
                              workloads=bench.select(bench.QUICK if size == "quick"
                                                     else bench.FULL, [req.workload]))
    counts_file = raw / f"{mode}-{size}.txt"
    counts_file.unlink(missing_ok=True)
    greq = bench.guest_request(breq, mode, req.cpus, 0, req.kernel)
    greq = dataclasses.replace(greq, params=[*greq.params, "nokaslr"],
                               plugins=[qemu.plugin_arg(so, out=str(counts_file))],
                               label=f"profile-{mode}-{size}-{req.cpus}cpu")
    r, _ = bench.boot(greq, {"mode": mode, "cpus": req.cpus, "round": 0})
    data = bench.BenchData()
    bench.collect(r, breq, mode, req.cpus, 0, data)
    if data.failures:
        f = data.failures[0]
        why = f["reason"] + (f" ({r.message})" if r.message else "")
        raise HarnessError(f"{greq.label}: {why}", f"the guest's console is in {r.log}")
    sample = next(s for s in data.samples if s["workload"] == req.workload)
    if not sample.get("user_pages"):
        raise HarnessError(f"{greq.label}: workload {req.workload} reported no user pages")
    counts = read_counts(counts_file)
    offset = locate(counts, syms, str(req.system_map))
    if offset:
        printer.warn(f"{greq.label}: the kernel ran {offset:#x} above its System.map's "
                     "addresses although booted with nokaslr")
    # under -icount a guest second is 10^9 instructions
    return BootProfile(size, dict(by_function(counts, syms, offset)),
                       int(sample["user_pages"]), sample["seconds"] * 1e9, offset, str(r.log))


def run(req: ProfileRequest, workdir: Path, layout: Layout = LAYOUT) -> List[ModeProfile]:
    """Boot each mode at both sizes; the plugin's counts go to workdir/raw."""
    so = build_plugin(layout)
    check_plugin(so)
    syms = SymbolMap.load(req.system_map)
    raw = workdir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    out: List[ModeProfile] = []
    total = 2 * len(req.modes)
    start = time.monotonic()
    for i, mode in enumerate(req.modes):
        boots: Dict[str, BootProfile] = {}
        for j, size in enumerate(SIZES):
            printer.info("profile", f"{mode}, {size} sizes ({2 * i + j + 1}/{total} boots, "
                         f"{printer.fmt_elapsed(time.monotonic() - start)} elapsed)")
            boots[size] = _boot(req, so, syms, mode, size, raw)
        out.append(per_unit(mode, boots["quick"], boots["full"]))
    return out


def report(req: ProfileRequest, profiles: Sequence[ModeProfile], command: str,
           meta: Mapping[str, object]) -> str:
    step = bench.select(bench.FULL, [req.workload])[0]
    steps = " and ".join(f"`{w.step.format(cpus=req.cpus)}`" for w in
                         (bench.select(bench.QUICK, [req.workload])[0], step))
    others = [n for n in step.reports if n != req.workload]
    also = (f"; the step also runs {', '.join(others)}, whose instructions count too"
            if others else "")
    return (f"Command: `{command}`\n\n"
            f"`{req.workload}`, {req.cpus} vCPU{'s' if req.cpus > 1 else ''}, "
            f"{meta.get('date', '')}, {meta.get('qemu', '')}: guest instructions under "
            f"TCG `-icount` (each iteration of a `rep` string instruction counts as one), "
            f"counted per translation block by a QEMU plugin. Each mode booted with "
            f"bench's quick sizes and with its full ones (steps {steps}{also}); the "
            f"quick boot's counts are subtracted from the full one's.\n\n"
            + totals_table(profiles) + "\n" + table(profiles, req.top) + "\n")


def run_and_report(req: ProfileRequest, outdir: Path, command: str,
                   layout: Layout = LAYOUT) -> List[ModeProfile]:
    """`./xpfo profile`: profile.md (also printed), profile.json and the
    plugin's raw counts in outdir, replaced whole when the run succeeds."""
    tmp = outdir.with_name(outdir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    profiles = run(req, tmp, layout)
    meta = {**bench.host_meta(), "command": command,
            "kernel_image": str(req.kernel or layout.bzimage),
            "system_map": str(req.system_map)}
    text = report(req, profiles, command, meta)
    (tmp / "profile.md").write_text(text)
    write_json(tmp / "profile.json", {
        "meta": meta, "workload": req.workload, "cpus": req.cpus, "unit": "user page",
        "modes": [{"mode": p.mode, "units": list(p.units), "total_per_unit": p.total,
                   "timed_per_unit": p.timed_per_unit, "per_unit": dict(p.per_unit)}
                  for p in profiles]})
    shutil.rmtree(outdir, ignore_errors=True)
    tmp.rename(outdir)
    printer.raw(text)
    printer.info("profile", f"table in {outdir / 'profile.md'}, every function in "
                 f"{outdir / 'profile.json'}, the plugin's counts in {outdir / 'raw'}")
    return profiles
