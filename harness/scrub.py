"""Build-machine paths out of saved results, before they go under docs/results.

The harness records the files a run used by their absolute paths on the
machine that ran it: under the checkout (its logs in out/logs/) and in
temporary folders (a ``--kernel`` image kept in /tmp). In the repository
those say nothing to a reader, and tests/test_docs.py refuses them.
``python -m harness.scrub PATH...`` rewrites, in place, in every text file
under each PATH: the checkout's absolute prefix to nothing, which leaves a
path relative to the repository (``out/logs/...``), and the temporary
folder's to ``$TMP/``. A JSON file stays valid: only characters inside
its strings change, and none of them needs escaping.
"""

import re
import sys
from pathlib import Path
from typing import Iterable, List, Sequence, Tuple

from .paths import LAYOUT

# what precedes a path's leading slash: not part of a word, a URL or a
# relative path (``build/tmp/``), nor the placeholder itself
_START = r"(?<![\w.~/$-])"
TMP = "$TMP/"


def rules(roots: Sequence[str]) -> List[Tuple["re.Pattern[str]", str]]:
    """The rewrites: each checkout root (with its slash) to nothing, then
    the temporary folder (/tmp or /var/tmp, with its slash) to ``$TMP/``."""
    out = [(re.compile(_START + re.escape(r.rstrip("/") + "/")), "") for r in roots]
    out.append((re.compile(_START + r"/(?:var/)?tmp/"), TMP))
    return out


def scrub_text(text: str, roots: Sequence[str]) -> str:
    for pattern, repl in rules(roots):
        text = pattern.sub(repl, text)
    return text


def _text_files(paths: Iterable[Path]) -> Iterable[Path]:
    for p in paths:
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file() and not f.is_symlink():
                yield f


def scrub(paths: Iterable[Path], roots: Sequence[str]) -> List[Path]:
    """Rewrite the text files under `paths` in place; return those changed.
    Files that are not UTF-8 text (images) are left alone."""
    changed = []
    for f in _text_files(paths):
        data = f.read_bytes()
        if b"\0" in data:
            continue
        try:
            text = data.decode()
        except UnicodeDecodeError:
            continue
        new = scrub_text(text, roots)
        if new != text:
            f.write_text(new)
            changed.append(f)
    return changed


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m harness.scrub PATH... [--root DIR]...\n"
              "rewrite this checkout's absolute paths (and each --root's) to "
              "repository-relative ones, and /tmp's to $TMP/, in the text files under PATH",
              file=sys.stderr)
        return 2
    roots, paths = [str(LAYOUT.root)], []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--root" and args:
            roots.append(args.pop(0))
        else:
            paths.append(Path(a))
    for f in scrub(paths, roots):
        print(f"scrubbed {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
