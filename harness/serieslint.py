"""`./xpfo series-lint`: mechanical checks of the series in kernel/patches
that a maintainer would make before taking them, from the patch files alone
(no git, no kernel tree):

- rewrite: a patch removes (or replaces) a line that an earlier patch of
  the same series added to the same file;
- subject-length, subject-form, subject-case, subject-verb: the Subject
  (without "[PATCH ...]") is at most 75 characters, reads `prefix: summary`,
  the summary starts lower case unless with an acronym or identifier
  (upper case after an x86 prefix, as the tip tree has it), and
  not with a word that cannot be an imperative verb;
- fixes-tag: a patch whose subject or changelog says "fix" or "fixes" has
  no `Fixes:` trailer.

harness/serieslint_known.txt lists the findings the next re-cut removes;
tests/test_serieslint.py fails on any other finding and on a listed one
that no longer occurs."""

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from . import source
from .paths import Layout

KNOWN = Path(__file__).resolve().parent / "serieslint_known.txt"
SUBJECT_MAX = 75
# lines too common to say that a patch rewrites another (compared stripped,
# each run of white space one space)
TRIVIAL = frozenset({
    "", "{", "}", "};", "});", "} else {", "else", "*", "/*", "*/", "#else", "#endif",
    "return;", "return 0;", "return ret;", "return true;", "return false;", "break;",
    "continue;", "default:", "out:", ")", ");",
})
# words a summary cannot start with in the imperative (determiners)
NON_VERBS = frozenset({"a", "an", "the", "no", "one", "every", "each", "some", "any", "this"})
PREFIX = re.compile(r"((?:[\w./+-]+(?:, [\w./+-]+)*: )+)(.*)")
FIX_WORD = re.compile(r"\bfix(?:es)?\b", re.I)
FIXES_TRAILER = re.compile(r"^Fixes: [0-9a-f]{12,} \(\".*\"\)$", re.M)
HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


@dataclass(frozen=True)
class Finding:
    kind: str           # rewrite, subject-length, subject-form, subject-case, ...
    series: str         # kernel/PARTS folder, e.g. 1-xpfo
    patch: int          # number in its series
    file: str = ""      # rewrite: the file
    text: str = ""      # rewrite: the line; subject-*: the subject
    earlier: Optional[int] = None   # rewrite: the patch that added the line

    @property
    def key(self) -> str:
        """The finding's line in harness/serieslint_known.txt."""
        if self.kind == "rewrite":
            return f"rewrite {self.series} {self.patch} {self.file} {self.text}"
        return f"{self.kind} {self.series} {self.patch}"

    @property
    def detail(self) -> str:
        if self.kind == "rewrite":
            return f"{self.file}: removes `{self.text}` that patch {self.earlier} added"
        if self.kind == "subject-length":
            return f"{len(self.text)} characters: {self.text}"
        return self.text


@dataclass
class Patch:
    subject: str            # without "[PATCH ...]", unfolded
    message: str            # the changelog: after the headers, up to "---"
    # per file (the b/ path of its "diff --git" line): its hunks' (sign, line)
    changes: Dict[str, List[Tuple[str, str]]]


def parse(text: str) -> Patch:
    lines = text.splitlines()
    subject, i = "", 0
    while i < len(lines) and lines[i]:                     # the mail headers
        if lines[i].startswith("Subject:"):
            subject = lines[i][len("Subject:"):].strip()
            while i + 1 < len(lines) and lines[i + 1][:1] in (" ", "\t"):
                i += 1
                subject += lines[i]                     # RFC 5322 unfolding
        i += 1
    subject = re.sub(r"^\[[^\]]*PATCH[^\]]*\]\s*", "", subject)
    end = next((j for j in range(i, len(lines))
                if lines[j] == "---" or lines[j].startswith("diff --git ")), len(lines))
    return Patch(subject, "\n".join(lines[i:end]), dict(_hunks(lines[end:])))


def _hunks(lines: List[str]) -> Iterator[Tuple[str, List[Tuple[str, str]]]]:
    """(file, [(sign, line)]) for each file of a diff, read by the hunk
    headers' counts (so that the signature's "-- " is not a line)."""
    path, old, new, out = "", 0, 0, []
    for line in lines:
        if old > 0 or new > 0:
            sign, body = line[:1] or " ", line[1:]
            if sign == "\\":
                continue                                # \ No newline at end of file
            old -= sign in " -"
            new -= sign in " +"
            if sign in "+-":
                out.append((sign, body))
        elif line.startswith("diff --git "):
            if path:
                yield path, out
            path, out = line.rsplit(" b/", 1)[-1], []
        elif (m := HUNK.match(line)):
            old, new = int(m.group(1) or 1), int(m.group(2) or 1)
    if path:
        yield path, out


def subject_findings(series: str, n: int, p: Patch) -> List[Finding]:
    def found(kind: str) -> Finding:
        return Finding(kind, series, n, text=p.subject)
    out = []
    if len(p.subject) > SUBJECT_MAX:
        out.append(found("subject-length"))
    if FIX_WORD.search(p.subject + "\n" + p.message) and not FIXES_TRAILER.search(p.message):
        out.append(found("fixes-tag"))
    m = PREFIX.fullmatch(p.subject)
    if not m or not m.group(2).strip():
        return out + [found("subject-form")]
    word = m.group(2).split()[0]
    identifier = any(c.isupper() for c in word[1:]) or "_" in word or "(" in word
    if m.group(1).startswith("x86"):
        # the tip tree's convention: "x86/mm: Add ..."
        if word[0].islower() and not identifier:
            out.append(found("subject-case"))
    elif word[0].isupper() and not identifier:
        out.append(found("subject-case"))
    if word.lower().rstrip(",") in NON_VERBS:
        out.append(found("subject-verb"))
    return out


def check_series(series: str, patches: List[Path]) -> List[Finding]:
    """The findings of one series, its patch files in the order they apply."""
    out: List[Finding] = []
    added: Dict[Tuple[str, str], List[int]] = {}   # (file, line) -> patches that added it
    for path in patches:
        n = int(path.name.split("-", 1)[0])             # NNNN-subject.patch
        p = parse(path.read_text(errors="replace"))
        out += subject_findings(series, n, p)
        mine: List[Tuple[str, str]] = []
        for file, changes in p.changes.items():
            for sign, line in changes:
                key = (file, " ".join(line.split()))
                if key[1] in TRIVIAL:
                    continue
                if sign == "+":
                    mine.append(key)
                elif added.get(key):
                    out.append(Finding("rewrite", series, n, file, key[1], added[key].pop()))
        for key in mine:
            added.setdefault(key, []).append(n)
    return out


def check(root: Path) -> List[Finding]:
    """Every finding of every series of root/kernel/PARTS, in order."""
    layout = Layout(root=root)
    out: List[Finding] = []
    for part in source.read_parts(layout):
        folder = layout.patches / part.name
        out += check_series(part.name, sorted(p for p in folder.glob("[0-9]*.patch")
                                              if not p.name.startswith("0000-")))
    return out


def read_known(path: Optional[Path] = None) -> List[str]:
    """The keys of harness/serieslint_known.txt (or of `path`)."""
    text = (path or KNOWN).read_text()
    return [s for s in (ln.strip() for ln in text.splitlines())
            if s and not s.startswith("#")]


def compare(findings: List[Finding], known: List[str]) -> Tuple[List[Finding], List[str]]:
    """(the findings the known list lacks, the known entries found no more)."""
    left = Counter(known)
    new = []
    for f in findings:
        if left[f.key] > 0:
            left[f.key] -= 1
        else:
            new.append(f)
    return new, list(left.elements())


def table(findings: List[Finding]) -> str:
    lines = ["| finding | series | patch | what |", "|---|---|---|---|"]
    for f in findings:
        what = f.detail.replace("|", "\\|")
        lines.append(f"| {f.kind} | {f.series} | {f.patch} | {what} |")
    return "\n".join(lines)
