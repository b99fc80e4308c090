"""The kernel source: Debian's linux-source base plus the series, as a git tree."""

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from . import author as authorship
from . import printer
from .errors import HarnessError
from .paths import LAYOUT, Layout

BASE_TAG = "xpfo-base"
STAMP = ".git/xpfo-series"
GIT_ID = ["-c", "user.name=xpfo harness", "-c", "user.email=xpfo@localhost",
          "-c", "commit.gpgsign=false"]


@dataclass(frozen=True)
class Base:
    package: str
    version: str
    tarball: Path


def read_base(layout: Layout = LAYOUT) -> Base:
    kv: Dict[str, str] = {}
    for line in layout.base_file.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            kv[k.strip()] = v.strip()
    try:
        return Base(kv["package"], kv["version"], Path(kv["tarball"]))
    except KeyError as e:
        raise HarnessError(f"{layout.base_file}: missing key {e}") from None


def installed_version(package: str) -> Optional[str]:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                             capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def check_base(base: Base) -> None:
    """Fail if the base is missing; warn if it is not the version we checked."""
    have = installed_version(base.package)
    if not base.tarball.exists():
        raise HarnessError(
            f"kernel source {base.tarball} is missing ({base.package} not installed)",
            f"run ./xpfo setup (installs {base.package}), or apt-get install {base.package}")
    if have != base.version:
        printer.warn(
            f"{base.package} installed is {have or 'unknown'}, the series was last "
            f"checked against {base.version}: patches may not apply; if they do, "
            f"update kernel/BASE")


@dataclass(frozen=True)
class Part:
    """One series of kernel/patches: its folder and how many patches it has."""
    name: str
    count: int


_PART_NAME = re.compile(r"^[0-9][0-9a-z-]*$")


_AUTHOR_KEY = "author:"


def read_parts(layout: Layout = LAYOUT) -> List[Part]:
    """kernel/PARTS: the series in the order they apply, one per line
    ("<folder> <number of patches>"). Without it the patches are one series
    directly in kernel/patches. An "author:" line is read_author()'s."""
    path = layout.patches.parent / "PARTS"
    if not path.exists():
        return []
    parts: List[Part] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip().startswith(_AUTHOR_KEY):
            continue
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if (len(fields) != 2 or not _PART_NAME.match(fields[0]) or
                not fields[1].isdigit() or int(fields[1]) < 1):
            raise HarnessError(f"{path}:{n}: expected '<folder> <number of patches>', "
                               f"got {line!r}")
        if any(p.name == fields[0] for p in parts):
            raise HarnessError(f"{path}:{n}: {fields[0]} is named twice")
        parts.append(Part(fields[0], int(fields[1])))
    if not parts:
        raise HarnessError(f"{path} names no series")
    return parts


def read_author(layout: Layout = LAYOUT) -> Optional[authorship.Identity]:
    """The "author: Name <user@host>" line of kernel/PARTS, if it has one:
    the identity ./xpfo export writes when --author is not given. The rest
    of the line is the identity ('#' is no comment there)."""
    path = layout.patches.parent / "PARTS"
    if not path.exists():
        return None
    found: Optional[authorship.Identity] = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip().startswith(_AUTHOR_KEY):
            continue
        if found is not None:
            raise HarnessError(f"{path}:{n}: a second author: line")
        found = authorship.parse(line.strip()[len(_AUTHOR_KEY):].strip(),
                                 where=f"{path}:{n}: author:")
    return found


def _series_patches(folder: Path) -> List[Path]:
    return sorted(p for p in folder.glob("*.patch") if not p.name.startswith("0000-"))


def patch_files(layout: Layout = LAYOUT) -> List[Path]:
    """Every patch in the order git am applies them: each series of
    kernel/PARTS in turn, cover letters (0000-*) left out."""
    if not layout.patches.is_dir():
        return []
    parts = read_parts(layout)
    if not parts:
        return _series_patches(layout.patches)
    files: List[Path] = []
    for part in parts:
        got = _series_patches(layout.patches / part.name)
        if len(got) != part.count:
            raise HarnessError(f"kernel/patches/{part.name} has {len(got)} patches, "
                               f"kernel/PARTS says {part.count}")
        files += got
    return files


def series_id(base: Base, patches: List[Path]) -> str:
    h = hashlib.sha256(base.version.encode())
    for p in patches:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


# The base commit's dates are fixed, so that its hash, the "base-commit:"
# line of every exported patch, is the same on every machine.
BASE_DATE = "2026-01-01T00:00:00+0000"
# What build/src's own git uses for the commits a developer adds there: the
# series' identity, and index lines as the exported patches have them.
TREE_CONFIG = (("user.name", authorship.PLACEHOLDER.name),
               ("user.email", authorship.PLACEHOLDER.email), ("core.abbrev", "7"))


def _git(src: Path, *args: str, check: bool = True,
         env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *GIT_ID, *args], cwd=src, capture_output=True,
                          text=True, check=check,
                          env={**os.environ, **env} if env else None)


_HUNK = re.compile(r"^(error: patch failed: .*|error: .*: patch does not apply|"
                   r"error: .*does not exist in index|Patch failed at .*)$", re.M)


def describe_am_failure(patch: Path, output: str) -> str:
    """One message naming the patch and the failing hunk(s) from git am."""
    hunks = _HUNK.findall(output)
    detail = "\n".join(f"  {h}" for h in hunks) if hunks else output.strip()[-800:]
    return f"patch {patch.name} does not apply:\n{detail}"


def _extract_base(base: Base, src: Path) -> None:
    tmp = src.with_name(src.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    printer.info("source", f"extracting {base.tarball}")
    cmd = ["tar", "-xf", str(base.tarball), "-C", str(tmp), "--strip-components=1"]
    printer.command(cmd)
    if subprocess.run(cmd).returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise HarnessError(f"could not extract {base.tarball}", "check free disk space (df -h)")
    printer.info("source", "committing the base to git (about a minute)")
    dates = {"GIT_AUTHOR_DATE": BASE_DATE, "GIT_COMMITTER_DATE": BASE_DATE}
    steps = [["init", "-q", "-b", "master"]] + [["config", k, v] for k, v in TREE_CONFIG] + \
        [["add", "-A", "-f"], ["commit", "-q", "-m", f"{base.package} {base.version}"],
         ["tag", BASE_TAG]]
    for args in steps:
        # Debian's top-level .gitignore ignores everything ("/*"): force-add
        r = _git(tmp, *args, check=False, env=dates)
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise HarnessError(f"git {' '.join(args)} failed in the base tree: {r.stderr.strip()}",
                               "check free disk space (df -h)")
    shutil.rmtree(src, ignore_errors=True)
    tmp.rename(src)


def _tree_is_clean(src: Path) -> bool:
    return _git(src, "status", "--porcelain", "--untracked-files=no").stdout.strip() == ""


def prepare(layout: Layout = LAYOUT, force: bool = False) -> Path:
    """Make build/src a git tree of base + series; reuse it when up to date."""
    base = read_base(layout)
    check_base(base)
    patches = patch_files(layout)
    want = series_id(base, patches)
    src = layout.src
    stamp = src / STAMP
    if stamp.exists() and stamp.read_text().strip() == want:
        return src
    if (src / ".git").is_dir():
        r = _git(src, "rev-parse", "HEAD", check=False)
        applied = (src / ".git" / "xpfo-head").read_text().strip() \
            if (src / ".git" / "xpfo-head").exists() else ""
        if not force and (not _tree_is_clean(src) or
                          (applied and r.stdout.strip() != applied)):
            raise HarnessError(
                f"{src} has commits or changes that are not in kernel/patches",
                "run ./xpfo export to save them as patches, or ./xpfo source --force to drop them")
        desc = _git(src, "describe", "--tags", "--exact-match", BASE_TAG, check=False)
        if desc.returncode != 0:
            _extract_base(base, src)
    else:
        _extract_base(base, src)
    stamp.unlink(missing_ok=True)
    _git(src, "am", "--abort", check=False)
    _git(src, "checkout", "-q", "-f", "master")
    _git(src, "reset", "-q", "--hard", BASE_TAG)
    for p in patches:
        r = _git(src, "am", "-q", "--whitespace=nowarn", str(p), check=False)
        if r.returncode != 0:
            msg = describe_am_failure(p, r.stdout + r.stderr)
            _git(src, "am", "--abort", check=False)
            _git(src, "reset", "-q", "--hard", BASE_TAG)
            raise HarnessError(msg, f"rebase the series on {base.version} in {src} "
                               f"(git am -3), then ./xpfo export")
    printer.info("source", f"{src}: {base.package} {base.version} + {len(patches)} patches")
    head = _git(src, "rev-parse", "HEAD").stdout.strip()
    (src / ".git" / "xpfo-head").write_text(head + "\n")
    stamp.write_text(want + "\n")
    return src


def head_commit(layout: Layout = LAYOUT) -> str:
    """The commit build/src is at: the series' HEAD as applied here."""
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=layout.src, capture_output=True,
                       text=True)
    return r.stdout.strip() or "unknown"


def export(layout: Layout = LAYOUT,
           author: Optional[authorship.Identity] = None) -> List[Path]:
    """Write the commits on top of the base back to kernel/patches, as
    `author` (else kernel/PARTS' author: line, else the placeholder that
    build/src commits as): see harness/author.py."""
    who = author or read_author(layout)
    src = layout.src
    if not (src / ".git").is_dir():
        raise HarnessError(f"no kernel tree at {src}", "run ./xpfo source first")
    if not _tree_is_clean(src):
        raise HarnessError(f"{src} has uncommitted changes", "commit them in the tree first")
    tmp = layout.patches.with_name("patches.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    parts = read_parts(layout)
    commits = _git(src, "rev-list", "--reverse", f"{BASE_TAG}..HEAD").stdout.split()
    ranges = [("", f"{BASE_TAG}..HEAD")]
    if parts:
        if sum(p.count for p in parts) != len(commits):
            raise HarnessError(f"kernel/PARTS counts {sum(p.count for p in parts)} patches, "
                               f"{src} has {len(commits)} commits",
                               "say in kernel/PARTS where each series ends")
        ranges, start, done = [], BASE_TAG, 0
        for p in parts:
            done += p.count
            ranges.append((p.name, f"{start}..{commits[done - 1]}"))
            start = commits[done - 1]
    for name, rng in ranges:
        out = tmp / name if name else tmp
        r = _git(src, "format-patch", "-q", "--no-signature", "--zero-commit",
                 "--base", BASE_TAG, "-o", str(out), rng, check=False)
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise HarnessError(f"git format-patch failed: {r.stderr.strip()}")
        old_dir = layout.patches / name if name else layout.patches
        for cover in sorted(old_dir.glob("0000-*.patch")) if old_dir.is_dir() else []:
            shutil.copy2(cover, out / cover.name)  # written by hand, kept across exports
        for patch in sorted(out.glob("*.patch")):
            authorship.rewrite_file(patch, who)
    old = layout.patches.with_name("patches.old")
    shutil.rmtree(old, ignore_errors=True)
    if layout.patches.exists():
        layout.patches.rename(old)
    tmp.rename(layout.patches)
    shutil.rmtree(old, ignore_errors=True)
    new = patch_files(layout)
    base = read_base(layout)
    (src / STAMP).write_text(series_id(base, new) + "\n")
    head = _git(src, "rev-parse", "HEAD").stdout.strip()
    (src / ".git" / "xpfo-head").write_text(head + "\n")
    by = f" from {who}" if who and who != authorship.PLACEHOLDER else ""
    printer.info("export", f"wrote {len(new)} patches to {layout.patches}{by}")
    return new
