"""Check the series patch by patch: each one builds, and checkpatch --strict."""

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from . import build, printer, source
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
          last: Optional[int] = None) -> List[PatchCheck]:
    """checkpatch every patch; build the tree at patches `first` to `last`
    (the last patch of the series when None)."""
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
    obj = layout.build / "series-obj"
    if not (wt / ".git").exists():
        shutil.rmtree(wt, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=src, check=False)
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(wt), commits[0]],
                       cwd=src, check=True)
    out: List[PatchCheck] = []
    for n, (patch, commit) in enumerate(zip(patches, commits), 1):
        msgs = checkpatch(src, patch)
        ok, secs = True, 0.0
        built = build_each and first <= n <= last
        if built:
            subprocess.run(["git", "checkout", "-q", "--detach", "-f", commit], cwd=wt, check=True)
            req = build.BuildRequest(src=wt, obj=obj, fragment=layout.fragment,
                                     jobs=jobs or (os.cpu_count() or 1) + 1)
            printer.info("series", f"building at {patch.relative_to(layout.patches)}")
            start = time.monotonic()
            r = build.configure(req, verify=False)
            if r.status is build.Status.SUCCESS:
                r = build.build(req)
            ok = r.status is build.Status.SUCCESS
            secs = time.monotonic() - start
            if not ok:
                printer.raw(r.message)
        out.append(PatchCheck(str(patch.relative_to(layout.patches)), commit[:12], built, ok,
                              round(secs, 1),
                              _count(msgs, "ERROR"), _count(msgs, "WARNING"),
                              _count(msgs, "CHECK"), msgs))
        state = ("ok" if ok else "FAILED") if built else "not built"
        printer.info("series", f"{patch.relative_to(layout.patches)}: build {state}, checkpatch "
                     f"{out[-1].errors} errors, {out[-1].warnings} warnings, "
                     f"{out[-1].checks} checks")
    return out


def table(results: List[PatchCheck]) -> str:
    lines = ["| patch | builds | build time | checkpatch --strict |", "|---|---|---|---|"]
    for r in results:
        built = ("yes" if r.build_ok else "NO") if r.built else "not built"
        secs = printer.fmt_elapsed(r.build_seconds) if r.built else "-"
        lines.append(f"| {r.patch} | {built} | {secs} | {r.errors} errors, "
                     f"{r.warnings} warnings, {r.checks} checks |")
    lines.append("")
    for r in results:
        for m in r.messages:
            lines.append(f"- {r.patch}: {m.split(': ', 1)[-1]}")
    return "\n".join(lines)
