"""Check the series patch by patch: each one builds, and checkpatch --strict."""

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

from . import build, deps, printer, source
from .errors import HarnessError
from .paths import LAYOUT, Layout


@dataclass(frozen=True)
class PatchCheck:
    patch: str
    commit: str
    built: bool
    build_ok: bool
    build_seconds: float
    errors: int
    warnings: int
    checks: int
    messages: List[str]
    # configuration name -> built there (only what was built)
    by_config: Dict[str, bool] = field(default_factory=dict)
    # features whose code the "on" build compiled although the patch does
    # not let them be selected yet (see force_selectable())
    forced: List[str] = field(default_factory=list)
    # --boot: mode -> the attack boot of the "on" kernel built there (see
    # boot_modes()), {"passed": bool, "failed": [reason, ...], "seconds": s}
    boots: Dict[str, dict] = field(default_factory=dict)


# The two configurations every patch is built in: the test kernel's
# (kernel/config/xpfo.fragment: XPFO, pgtprot, their KUnit tests, lkdtm), and
# the same with XPFO and pgtprot not set.
CONFIGS = ("on", "off")

# Objects that carry XPFO or pgtprot hooks: with --objects they are built at
# every patch, beside the objects of the patch's own C files.
HOOK_OBJECTS = (
    "mm/highmem.o", "mm/memory.o", "mm/page_alloc.o", "lib/iov_iter.o", "mm/util.o",
    "mm/shmem.o", "mm/vmstat.o", "mm/migrate.o", "mm/filemap.o", "mm/mmap.o",
    "mm/mprotect.o", "kernel/sched/core.o", "kernel/entry/common.o", "kernel/fork.o",
    "arch/x86/mm/tlb.o", "arch/x86/mm/init.o", "arch/x86/mm/fault.o",
    "arch/x86/mm/pat/set_memory.o", "arch/x86/mm/pgtable.o",
)

# Objects only a kernel with XPFO or pgtprot builds.
FEATURE_ONLY_OBJECTS = frozenset({
    "mm/xpfo.o", "mm/xpfo_kunit.o", "arch/x86/mm/xpfo.o", "arch/x86/mm/pgtprot.o",
    "arch/x86/mm/pgtprot_kunit.o", "lib/test_xpfo_ret2dir.o",
})


def config_fragment(layout: Layout, name: str) -> Path:
    """The fragment of configuration @name (see CONFIGS)."""
    if name == "on":
        return layout.fragment
    frag = layout.build / "series-off.fragment"
    lines = [line for line in layout.fragment.read_text().splitlines(keepends=True)
             if "XPFO" not in line and "PGTPROT" not in line]
    frag.parent.mkdir(parents=True, exist_ok=True)
    frag.write_text("".join(lines) + "# CONFIG_XPFO is not set\n# CONFIG_PGTPROT is not set\n")
    return frag


# A feature's Kconfig symbol, the file that defines it, and the symbol the
# architecture selects to let it be turned on: until the series adds that
# select (its last patch but the later features: after the conversions and
# the tests the feature needs), the feature cannot be set, and a kernel
# built there has it off.
SELECTS = (("XPFO", "mm/Kconfig", "ARCH_SUPPORTS_XPFO"),
           ("PGTPROT", "mm/Kconfig", "ARCH_SUPPORTS_PGTPROT"))


def force_selectable(wt: Path) -> List[str]:
    """At a patch where a feature's code is there but x86 does not select it
    yet, add the select to the checked-out tree @wt, so that the "on" build
    compiles that code (the next checkout drops it); the features it did
    that for."""
    forced = []
    arch = wt / "arch/x86/Kconfig"
    for name, defined_in, symbol in SELECTS:
        text = arch.read_text()
        if (not re.search(rf"^config {name}$", (wt / defined_in).read_text(), re.M)
                or f"select {symbol}" in text):
            continue
        i = text.index("\tselect ", text.index("\nconfig X86\n"))
        arch.write_text(f"{text[:i]}\tselect {symbol}\t\tif X86_64\n{text[i:]}")
        forced.append(name)
    return forced


# The attack boot of --boot: XPFO's recommended mode wherever the patch's
# kernel has XPFO, and the recommended configuration wherever it has pgtprot
BOOT_XPFO_MODE = "strict"
BOOT_PGT_MODE = "strict+pgt-batched"
BOOT_CPUS = 2
BOOT_TIMEOUT = 900.0


def boot_modes(config: str, forced: Sequence[str]) -> List[str]:
    """The modes --boot boots a patch's "on" kernel in, from its .config
    text: none where XPFO is off or was only forced on (a kernel built from
    the patch alone cannot have it)."""
    on = set(re.findall(r"^CONFIG_(XPFO|PGTPROT)=y$", config, re.M)) - set(forced)
    if "XPFO" not in on:
        return []
    return [BOOT_XPFO_MODE] + ([BOOT_PGT_MODE] if "PGTPROT" in on else [])


def pgtprot_test(reason: str) -> bool:
    """Is @reason (a judged failure, "TEST (mode): detail") about one of the
    pgtprot series' tests: its lkdtm tests, its alias audit, the image tail?"""
    from . import attacks
    names = ([a.name for a in attacks.PGTPROT_ATTACKS] + [attacks.IMAGE_TAIL]
             + [attacks.pgt_audit_test(label) for label in attacks.PGT_AUDIT_LABELS])
    return any(reason.startswith(f"{n} (") for n in names)


def boot_patch(obj: Path, forced: Sequence[str], label: str) -> Dict[str, dict]:
    """The attack boots of the kernel built in @obj: `./xpfo test`'s attack
    boot (lkdtm, ret2dir, KUnit, the audits) less the predict step, whose
    reuse counts belong to a later patch of the series. In a tree without
    the pgtprot series (no PGTPROT symbol in its .config), or where pgtprot
    was only forced on (its tests may not be there yet), the failures of
    pgtprot's own tests are set apart as "n/a", not counted."""
    from . import attack_runs  # the boot machinery, only for --boot
    config = (obj / ".config").read_text()
    pgtprot_tree = (re.search(r"^(# )?CONFIG_PGTPROT[= ]", config, re.M) is not None
                    and "PGTPROT" not in forced)
    out: Dict[str, dict] = {}
    for mode in boot_modes(config, forced):
        start = time.monotonic()
        r = attack_runs.run(mode, BOOT_CPUS, BOOT_TIMEOUT,
                            kernel=obj / "arch" / "x86" / "boot" / "bzImage",
                            predict=False, label=f"series-{label}-{mode}")
        reasons = list(r.get("reasons", []))
        na = [] if pgtprot_tree else [x for x in reasons if pgtprot_test(x)]
        failed = [x for x in reasons if x not in na]
        out[mode] = {"passed": r["passed"] or (reasons != [] and not failed),
                     "failed": failed, "not_applicable": na,
                     "seconds": round(time.monotonic() - start, 1), "log": r["log"]}
        printer.info("series", f"{label}: attack boot {mode} "
                     + ("passed" if out[mode]["passed"] else f"FAILED ({len(failed)})")
                     + (f", {len(na)} pgtprot tests not counted" if na else ""))
    return out


def objects_for(layout: Layout, cfg: str, c_files: List[str]) -> List[str]:
    """The objects --objects builds at a patch in configuration @cfg: the
    hook carriers and the objects of the patch's C files that the test
    kernel's full build has (build/obj), less those only XPFO or pgtprot
    build when @cfg is "off"."""
    own = [f[:-2] + ".o" for f in c_files if f.endswith(".c") and not f.startswith("tools/")]
    # compiled as part of another file (build_policy.c includes idle.c)
    own = [o for o in own if o != "kernel/sched/idle.o" and (layout.obj / o).exists()]
    objs = list(HOOK_OBJECTS) + [o for o in own if o not in HOOK_OBJECTS]
    if cfg == "off":
        objs = [o for o in objs if o not in FEATURE_ONLY_OBJECTS]
    return objs


def build_objects(req: build.BuildRequest, objs: List[str]) -> build.BuildResult:
    """make prepare, then @objs with KCFLAGS=-Werror."""
    start = time.monotonic()
    for targets in (["prepare"], objs):
        cmd = build._make(req, "KCFLAGS=-Werror", *targets)
        printer.command(cmd)
        r = subprocess.run(cmd, cwd=req.src, env=build._env(req), capture_output=True,
                           text=True)
        if r.returncode != 0:
            errs = [line for line in (r.stdout + r.stderr).splitlines()
                    if "error" in line or "Error" in line]
            return build.BuildResult(build.Status.BUILD_FAILURE, time.monotonic() - start,
                                     message="\n".join(errs[-20:]))
    return build.BuildResult(build.Status.SUCCESS, time.monotonic() - start)


_KIND = re.compile(r"^(ERROR|WARNING|CHECK): (.*)$")


def checkpatch(src: Path, patch: Path) -> List[str]:
    env = dict(os.environ)
    venv_bin = LAYOUT.root / ".venv" / "bin"
    env["PATH"] = f"{venv_bin}:{env.get('PATH', '')}"  # spdxcheck.py needs ply
    r = subprocess.run(["perl", str(src / "scripts/checkpatch.pl"), "--strict", "--no-summary",
                        "--terse", "--show-types", str(patch)], cwd=src, env=env,
                       capture_output=True, text=True)
    return [line.strip() for line in r.stdout.splitlines() if line.strip()]


def _count(messages: List[str], kind: str) -> int:
    return sum(1 for m in messages if f": {kind}:" in m)


def check(layout: Layout = LAYOUT, jobs: Optional[int] = None,
          build_each: bool = True, first: int = 1,
          last: Optional[int] = None, configs: Sequence[str] = CONFIGS,
          objects: bool = False, boot: bool = False) -> List[PatchCheck]:
    """checkpatch every patch; build the tree at patches `first` to `last`
    (the last patch of the series when None) in each of @configs: the whole
    bzImage over the previous patch's objects, or with @objects make
    prepare and the objects objects_for() names, with -Werror. With @boot
    the "on" kernel is built whole and booted (boot_patch()) where it has
    the features."""
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        raise HarnessError(f"unknown configuration {bad[0]!r}", "known: " + ", ".join(CONFIGS))
    if boot and "on" not in configs:
        raise HarnessError("--boot boots the on configuration's kernel", "add --configs on")
    if objects and build_each and not (layout.obj / "vmlinux.o").exists():
        raise HarnessError(f"--objects takes the list of objects from the full build in "
                           f"{layout.obj}, which is not there", "run ./xpfo build first")
    with worktree_lock(layout):
        return _check(layout, jobs, build_each, first, last, configs, objects, boot)


@contextlib.contextmanager
def worktree_lock(layout: Layout) -> Iterator[None]:
    """One series check at a time: two would check out different patches in
    the same build/series-src under each other's builds."""
    layout.build.mkdir(parents=True, exist_ok=True)
    with open(layout.build / ".xpfo-series.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HarnessError("another ./xpfo series-check is using build/series-src",
                               "wait for it to end, or stop it (its python process too)"
                               ) from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _check(layout: Layout, jobs: Optional[int], build_each: bool, first: int,
           last: Optional[int], configs: Sequence[str], objects: bool,
           boot: bool) -> List[PatchCheck]:
    src = source.prepare(layout)
    patches = source.patch_files(layout)
    commits = subprocess.run(["git", "rev-list", "--reverse", f"{source.BASE_TAG}..HEAD"],
                             cwd=src, capture_output=True, text=True,
                             check=True).stdout.split()
    if len(commits) != len(patches):
        raise HarnessError(f"{src} has {len(commits)} commits but kernel/patches has "
                           f"{len(patches)} patches", "run ./xpfo source --force or export")
    if first > len(patches):
        raise HarnessError(f"--from {first}: the series has {len(patches)} patches")
    last = len(patches) if last is None else last
    if last < first or last > len(patches):
        raise HarnessError(f"--to {last}: not a patch from {first} to {len(patches)}")
    wt = layout.build / "series-src"
    if not (wt / ".git").exists():
        shutil.rmtree(wt, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=src, check=False)
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(wt), commits[0]],
                       cwd=src, check=True)
    out: List[PatchCheck] = []
    for n, (patch, commit) in enumerate(zip(patches, commits), 1):
        msgs = checkpatch(src, patch)
        ok, secs = True, 0.0
        by_config: Dict[str, bool] = {}
        forced: List[str] = []
        boots: Dict[str, dict] = {}
        built = build_each and first <= n <= last
        if built:
            subprocess.run(["git", "checkout", "-q", "--detach", "-f", commit], cwd=wt, check=True)
            files = subprocess.run(["git", "show", "--name-only", "--format=", commit], cwd=wt,
                                   capture_output=True, text=True, check=True).stdout.split()
            for cfg in configs:
                if cfg == "on":
                    forced = force_selectable(wt)
                else:
                    subprocess.run(["git", "checkout", "-q", "-f", commit, "--", "."], cwd=wt,
                                   check=True)
                obj = layout.build / ("series-obj" if cfg == "on" else f"series-obj-{cfg}")
                req = build.BuildRequest(src=wt, obj=obj, fragment=config_fragment(layout, cfg),
                                         jobs=jobs or (os.cpu_count() or 1) + 1)
                printer.info("series", f"building at {patch.relative_to(layout.patches)}, "
                             f"XPFO and pgtprot {cfg}" + (", objects" if objects else ""))
                start = time.monotonic()
                r = build.configure(req, verify=False)
                whole = not objects or (boot and cfg == "on")
                if r.status is build.Status.SUCCESS:
                    r = (build.build(req) if whole
                         else build_objects(req, objects_for(layout, cfg, files)))
                by_config[cfg] = r.status is build.Status.SUCCESS
                secs += time.monotonic() - start
                if not by_config[cfg]:
                    printer.raw(r.message)
                elif boot and cfg == "on":
                    boots = boot_patch(obj, forced, f"{n:02d}")
            ok = all(by_config.values())
        out.append(PatchCheck(str(patch.relative_to(layout.patches)), commit[:12], built, ok,
                              round(secs, 1),
                              _count(msgs, "ERROR"), _count(msgs, "WARNING"),
                              _count(msgs, "CHECK"), msgs, by_config, forced, boots))
        state = ("ok" if ok else "FAILED") if built else "not built"
        printer.info("series", f"{patch.relative_to(layout.patches)}: build {state}, checkpatch "
                     f"{out[-1].errors} errors, {out[-1].warnings} warnings, "
                     f"{out[-1].checks} checks")
    return out


def _cell(r: PatchCheck, cfg: str) -> str:
    if cfg not in r.by_config:
        return "-"
    cell = "yes" if r.by_config[cfg] else "NO"
    if cfg == "on" and r.forced:
        cell += f" ({', '.join(r.forced)} forced)"
    return cell


def table(results: List[PatchCheck]) -> str:
    cfgs = [c for c in CONFIGS if any(c in r.by_config for r in results)]
    head = "".join(f" XPFO, pgtprot {c} |" for c in cfgs) or " builds |"
    lines = [f"| patch |{head} build time | checkpatch --strict |",
             "|---|" + "---|" * (max(len(cfgs), 1) + 2)]
    for r in results:
        if cfgs:
            built = "".join(f" {_cell(r, c)} |" for c in cfgs)
        else:
            built = f" {('yes' if r.build_ok else 'NO') if r.built else 'not built'} |"
        secs = printer.fmt_elapsed(r.build_seconds) if r.built else "-"
        lines.append(f"| {r.patch} |{built} {secs} | {r.errors} errors, "
                     f"{r.warnings} warnings, {r.checks} checks |")
    lines.append("")
    if any(r.forced for r in results):
        lines += ["\"forced\": the patch does not let the feature be selected yet (x86 "
                  "selects it only after the patches it needs, its tests included); the on "
                  "build added the select line, so that the feature's code is compiled at "
                  "that patch. A kernel built there from the patch alone has the feature "
                  "off.", ""]
    for r in results:
        for m in r.messages:
            lines.append(f"- {r.patch}: {m.split(': ', 1)[-1]}")
    return "\n".join(lines)


def repo_head(layout: Layout = LAYOUT) -> str:
    """The repository commit that holds kernel/patches (the kernel tree's
    own commits are re-made by git am in every clone)."""
    r = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=layout.root,
                       capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


# docs/SERIES.md: the per-patch table (series-check --write), then the
# shipped configurations' (configs --write); each command keeps the other's
SHIPPED_HEADING = "## Shipped configurations"


def doc_path(layout: Layout = LAYOUT) -> Path:
    return layout.root / "docs" / "SERIES.md"


def split_doc(path: Path) -> "tuple[str, str]":
    """docs/SERIES.md: the per-patch part and the shipped-configurations part."""
    try:
        text = path.read_text()
    except OSError:
        return "", ""
    i = text.find(SHIPPED_HEADING)
    return (text, "") if i < 0 else (text[:i], "\n" + text[i:])


def _rest(text: str) -> str:
    """What follows the per-patch table in docs/SERIES.md: from its first
    second-level heading on (the sections written by hand, the attack boots,
    the shipped configurations)."""
    i = text.find("\n## ")
    return "" if i < 0 else text[i:]


def write_doc(text: str, objects: bool, layout: Layout = LAYOUT) -> Path:
    """The per-patch table into docs/SERIES.md, every section after it kept."""
    path = doc_path(layout)
    path.parent.mkdir(exist_ok=True)
    rest = _rest(path.read_text()) if path.exists() else ""
    how = ("`make prepare`, then with `-Werror` the objects of the patch's own C "
           "files that the test kernel builds and the files that carry XPFO and "
           "pgtprot hooks (`harness/series.py`)" if objects else
           "the whole bzImage over the previous patch's objects, with ccache: build "
           "times are incremental, not clean builds")
    cmd = "./xpfo series-check" + (" --objects" if objects else "") + " --write"
    path.write_text(f"# Series check\n\nCommand: `{cmd}`, "
                    f"{time.strftime('%Y-%m-%d', time.gmtime())}, repository commit "
                    f"`{repo_head(layout)}`.\n\n"
                    "Each patch is checked out in `build/series-src` and built in the "
                    "test kernel's configuration (XPFO and pgtprot on) and in the same "
                    f"with both not set (off): {how}.\n\n"
                    f"{text}\n{rest}")
    return path


BOOT_HEADING = "## Attack boot at each patch"


def boot_rows(results: List[PatchCheck]) -> "tuple[List[str], List[str], List[str]]":
    """The patches --boot booted: their table rows, the lines of what
    failed, and the names of pgtprot's tests not counted."""
    rows, failures = [], []
    for r in (r for r in results if r.boots):
        cells = []
        for mode in (BOOT_XPFO_MODE, BOOT_PGT_MODE):
            b = r.boots.get(mode)
            cells.append("-" if b is None else "passed" if b["passed"]
                         else f"FAILED ({len(b['failed'])})")
        secs = sum(b["seconds"] for b in r.boots.values())
        rows.append(f"| {r.patch} | {' | '.join(cells)} | {printer.fmt_elapsed(secs)} |")
        for mode, b in r.boots.items():
            failures += [f"- {r.patch}, {mode}: {reason}" for reason in b["failed"]]
    na = sorted({x.split(" (", 1)[0] for r in results for b in r.boots.values()
                 for x in b.get("not_applicable", [])})
    return rows, failures, na


BOOT_HEAD = [f"| patch | {BOOT_XPFO_MODE} | {BOOT_PGT_MODE} | boot time |", "|---|---|---|---|"]
NA_LINE = ("Not counted where the tree has no pgtprot series or pgtprot was only forced on "
           "(its tests, which may be missing there): ")


def boot_table(results: List[PatchCheck]) -> str:
    """The patches --boot booted: one column per mode, then what failed."""
    rows, failures, na = boot_rows(results)
    lines = BOOT_HEAD + rows + [""] + failures
    if na:
        lines += ["", NA_LINE + ", ".join(na) + "."]
    return "\n".join(lines)


def write_boot_doc(results: List[PatchCheck], first: int, last: int, seconds: float,
                   layout: Layout = LAYOUT) -> Path:
    """The attack boots into their section of docs/SERIES.md (made before the
    shipped configurations' if there is none), merged with the patches an
    earlier run booted: a patch booted again replaces its row; the rest of
    the file is kept."""
    path = doc_path(layout)
    doc = path.read_text() if path.exists() else "# Series check\n"
    i = doc.find(BOOT_HEADING)
    old = ""
    if i >= 0:
        j = doc.find("\n## ", i + len(BOOT_HEADING))
        old = doc[i:] if j < 0 else doc[i:j + 1]
    rows, failures, na = boot_rows(results)
    patches = {r.patch for r in results if r.boots}
    runs = [line for line in old.splitlines() if line.startswith("- `./xpfo series-check")]
    old_rows = [line for line in old.splitlines() if line.startswith("| ")
                and line not in BOOT_HEAD and line.split(" | ")[0][2:] not in patches]
    old_fail = [line for line in old.splitlines() if line.startswith("- ")
                and not line.startswith("- `") and line[2:].split(", ")[0] not in patches]
    old_na = next((line[len(NA_LINE):].rstrip(".").split(", ") for line in old.splitlines()
                   if line.startswith(NA_LINE)), [])
    runs.append(f"- `./xpfo series-check --boot --configs on --from {first} --to {last} "
                f"--write`: {time.strftime('%Y-%m-%d', time.gmtime())}, repository commit "
                f"`{repo_head(layout)}`, {printer.fmt_elapsed(seconds)} (builds included)")
    rows = sorted(old_rows + rows)
    failures = sorted(old_fail + failures)
    na = sorted(set(old_na) | set(na))
    section = "\n".join(
        [BOOT_HEADING, "",
         "At every patch whose kernel in the test configuration has XPFO (pgtprot), "
         f"`./xpfo test`'s attack boot in {BOOT_XPFO_MODE} (and {BOOT_PGT_MODE}), QEMU TCG, "
         f"{BOOT_CPUS} vCPUs, judged as `./xpfo test` judges it, without the predict step "
         "(the random-block patch's guarantee). A test a later patch adds fails as missing. "
         "The runs:", ""]
        + runs + [""] + BOOT_HEAD + rows + [""] + failures
        + (["", NA_LINE + ", ".join(na) + "."] if na else [])) + "\n"
    if i >= 0:
        doc = doc.replace(old, section + ("\n" if old.endswith("\n\n") else ""), 1)
    else:
        k = doc.find(SHIPPED_HEADING)
        doc = (doc.rstrip("\n") + "\n\n" + section if k < 0
               else doc[:k] + section + "\n" + doc[k:])
    path.write_text(doc)
    return path


def run_check(layout: Layout = LAYOUT, jobs: Optional[int] = None, build_each: bool = True,
              first: int = 1, last: Optional[int] = None, configs: Sequence[str] = CONFIGS,
              objects: bool = False, write: bool = False, boot: bool = False) -> bool:
    """`./xpfo series-check`: check every patch, print the table (and with
    `write` record it; with `boot`, the attack boots' table instead); true
    when every patch built with no checkpatch error and every boot passed."""
    deps.ensure(quiet=True)
    start = time.monotonic()
    results = check(layout, jobs=jobs, build_each=build_each, first=first, last=last,
                    configs=configs, objects=objects, boot=boot)
    text = table(results)
    printer.raw(text)
    if boot:
        btext = boot_table(results)
        printer.raw(btext)
        if write:
            n = len(results)
            write_boot_doc(results, first, n if last is None else last,
                           time.monotonic() - start, layout)
    elif write:
        write_doc(text, objects, layout)
    return all(r.build_ok and r.errors == 0 and all(b["passed"] for b in r.boots.values())
               for r in results)
