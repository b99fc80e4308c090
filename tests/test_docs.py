"""The docs against the repository (host-only):

- every relative link in README.md and docs/**/*.md reaches a file, and
  every ``#anchor`` a heading of its target (GitHub's slugs);
- README.md, every text file under docs/ (docs/results included) and the
  harness's sources hold no build-machine path, no tracker number and no
  working-round counter;
- the counts the docs quote (KUnit cases per suite, modes, machine kinds,
  patches per series, the mm selftests' time limits) are the code's: each
  phrase is found by a regular expression and compared with what the
  patches and the harness hold.
"""

import ast
import dataclasses
import importlib
import re
import types
from pathlib import Path
from typing import Dict, Iterator, List, Tuple
from urllib.parse import unquote

import pytest

from conftest import ROOT
from harness import machines, modes, selftests

DOCS = ROOT / "docs"
NUMBERS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}
NUM = r"(?:\d+|" + "|".join(NUMBERS) + ")"   # a count, in digits or in words


def _md_files(results: bool = True) -> List[Path]:
    files = [ROOT / "README.md"] + sorted(DOCS.rglob("*.md"))
    return [f for f in files if results or DOCS / "results" not in f.parents]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _number(word: str) -> int:
    return int(word) if word.isdigit() else NUMBERS[word.lower()]


def _prose(text: str, code: bool = False) -> str:
    """The text without fenced code blocks (blank lines in their place)
    and, unless `code`, with each inline code span emptied to ``."""
    out, fence = [], None
    for line in text.splitlines():
        m = re.match(r"\s*(```|~~~)", line)
        if m and (fence is None or m.group(1) == fence):
            fence = None if fence else m.group(1)
            out.append("")
            continue
        out.append("" if fence else line if code else re.sub(r"`[^`\n]*`", "``", line))
    return "\n".join(out)


# ---------------------------------------------------------------------------
# links and anchors

def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text, lower case, without
    punctuation but '-' and '_', each space a '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text.replace("`", "")).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set:
    seen: Dict[str, int] = {}
    out = set()
    text = path.read_text()
    for line in _prose(text, code=True).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    out.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return out


LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def links(path: Path) -> Iterator[Tuple[int, str]]:
    for n, line in enumerate(_prose(path.read_text()).splitlines(), 1):
        for m in LINK.finditer(line):
            yield n, m.group(1)


def test_slug_follows_github():
    assert slug("XPFO's flushes by CPU class") == "xpfos-flushes-by-cpu-class"
    assert slug("The global-bit policy without PTI: `xpfo_dmap=global` or `nonglobal` "
                "(2026-11-26, 69 patches)") == ("the-global-bit-policy-without-pti-xpfo_dmapglobal"
                                                "-or-nonglobal-2026-11-26-69-patches")
    assert slug("Multi-threaded TCG and the kernel's text patching") == \
        "multi-threaded-tcg-and-the-kernels-text-patching"


def test_relative_links_and_anchors_resolve():
    bad = []
    cache: Dict[Path, set] = {}
    for md in _md_files():
        for n, target in links(md):
            if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue            # a URL
            path, _, anchor = unquote(target).partition("#")
            dest = (ROOT / path.lstrip("/")) if path.startswith("/") else (
                (md.parent / path) if path else md)
            where = f"{_rel(md)}:{n}: {target}"
            if not dest.exists():
                bad.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md":
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    bad.append(f"{where}: no heading with that anchor in {_rel(dest.resolve())}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------------------
# build-machine paths, tracker numbers, working-round counters

# An absolute path on the machine that built or ran something: the
# checkout (/work/main), a home, a temporary folder. Not a URL or a
# relative path (the look-behind), not the guest's paths (/proc, /sys,
# /dev, /mnt/scratch), and not the guest's own /tmp files, which the
# guest programs name.
BUILD_PATH = re.compile(r"(?<![\w.~/$-])/(?:work|home|root|Users|tmp|var/tmp)/"
                        r"(?!(?:xbench|stress\.dat|selftests|xh-|\.xh-rc))")
TRACKER = re.compile(r"\b(?:issues?|tickets?|bugs?|PR)\s*#?\d+\b|\bissue-\d+", re.I)
# "session 16", "round 3 of the session", "the session's build", and the
# folders such sessions wrote (docs/s16/, docs/bench-s19-pf41/)
ROUND = re.compile(r"\bsessions?\s*#?\d+|\bround \d+ of (?:the|this) (?:session|work)"
                   r"|\b(?:the|this|that|last|previous|next) session(?:'s)?(?![\w-])"
                   r"|\bdocs/(?:bench-)?s\d+\b|\bbench-s\d+-", re.I)


def _text_files() -> Iterator[Path]:
    yield ROOT / "README.md"
    yield from sorted(p for p in DOCS.rglob("*") if p.is_file())
    yield from sorted((ROOT / "harness").rglob("*.py"))


def _findings(pattern: "re.Pattern[str]") -> List[str]:
    out = []
    for f in _text_files():
        data = f.read_bytes()
        if b"\0" in data:
            continue                # an image
        for n, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            for m in pattern.finditer(line):
                out.append(f"{_rel(f)}:{n}: {line[max(0, m.start() - 40):m.end() + 40]!r}")
    return out


def _report(found: List[str], what: str, hint: str) -> str:
    more = f"\n... and {len(found) - 20} more" if len(found) > 20 else ""
    return f"{len(found)} {what} ({hint}):\n" + "\n".join(found[:20]) + more


def test_no_build_machine_paths():
    found = _findings(BUILD_PATH)
    assert not found, _report(found, "build-machine paths",
                              "python -m harness.scrub PATH rewrites them")


def test_no_tracker_numbers():
    found = _findings(TRACKER)
    assert not found, _report(found, "tracker numbers", "name the work or its date instead")


def test_no_working_round_counters():
    found = _findings(ROUND)
    assert not found, _report(found, "working-round counters",
                              "name the date, the series state or the folder under docs/results")


@pytest.mark.parametrize("text", [
    "log /work/main/out/logs/a.log", "--kernel /tmp/k/bz61", "off60:/tmp/k/bz60:off"])
def test_build_path_pattern_finds(text):
    assert BUILD_PATH.search(text)


@pytest.mark.parametrize("text", [
    "https://example.org/tmp/x", "build/tmp/x", "$TMP/k/bz61", "/proc/vmstat",
    "/mnt/scratch/xbench.dat", "/tmp/xbench-huge/f", "/sys/kernel/debug/xpfo/audit"])
def test_build_path_pattern_leaves(text):
    assert not BUILD_PATH.search(text)


def test_scrub_rewrites_paths_and_keeps_json(tmp_path):
    from harness import scrub
    f = tmp_path / "r.json"
    f.write_text('{"log": "/work/x/out/logs/a.log", "kernel": "/tmp/k/bz", '
                 '"url": "https://h/tmp/y"}\n')
    assert scrub.scrub([tmp_path], ["/work/x"]) == [f]
    assert f.read_text() == ('{"log": "out/logs/a.log", "kernel": "$TMP/k/bz", '
                             '"url": "https://h/tmp/y"}\n')


# ---------------------------------------------------------------------------
# counts the docs quote, against the code

def _prose_of(results: bool = False) -> List[Tuple[Path, str]]:
    return [(f, _prose(f.read_text())) for f in _md_files(results)]


def _raw_of() -> List[Tuple[Path, str]]:
    return [(f, f.read_text()) for f in _md_files(results=False)]


def _claims(pattern: str, raw: bool = False) -> List[Tuple[str, "re.Match[str]"]]:
    """Every match of `pattern` in README.md and docs/*.md (not results),
    with where it is. The pattern must match somewhere: a check whose
    phrase is gone from the docs must be updated with them."""
    out = []
    for f, text in (_raw_of() if raw else _prose_of()):
        for m in re.finditer(pattern, text):
            out.append((f"{_rel(f)}:{text.count(chr(10), 0, m.start()) + 1}", m))
    assert out, f"no doc says {pattern!r} any more: update tests/test_docs.py"
    return out


def kunit_cases() -> Dict[str, int]:
    """KUNIT_CASE entries per suite, the series applied in kernel/PARTS
    order: a case array's own lines, and the hunks of later patches that
    add (+) or remove (-) lines in it."""
    arrays: Dict[str, int] = {}
    suites: Dict[str, str] = {}
    for part, _ in parts():
        for patch in sorted((ROOT / "kernel" / "patches" / part).glob("[0-9]*.patch")):
            if patch.name.startswith("0000-"):
                continue
            array, suite = None, None
            for line in patch.read_text(errors="replace").splitlines():
                if line.startswith(("diff --git", "@@")):
                    m = re.search(r"struct kunit_case (\w+)\[\]", line)
                    array = m.group(1) if line.startswith("@@") and m else None
                    continue
                body, sign = line[1:], line[:1]
                if sign == "-" and line.startswith("---"):
                    continue
                m = re.search(r"struct kunit_case (\w+)\[\] = \{", body)
                if m and sign in " +":
                    array = m.group(1)
                    arrays.setdefault(array, 0)
                elif array and re.match(r"\s*KUNIT_CASE\w*\(", body):
                    arrays[array] = arrays.get(array, 0) + {"+": 1, "-": -1}.get(sign, 0)
                elif array and re.match(r"\s*\{\s*\}", body):
                    array = None
                if re.match(r"\};", body):
                    suite = None
                m = re.search(r"struct kunit_suite (\w+) = \{", body)
                if m and sign in " +":
                    suite = m.group(1)
                m = re.search(r"\.name = \"(\w+)\"", body)
                if suite and m and sign in " +":
                    suites[suite] = m.group(1)
                m = re.search(r"\.test_cases = (\w+)", body)
                if suite and m and sign in " +":
                    suites[suite + ".cases"] = m.group(1)
    return {name: arrays[suites[s + ".cases"]] for s, name in suites.items()
            if not s.endswith(".cases")}


def parts() -> List[Tuple[str, int]]:
    out = []
    for line in (ROOT / "kernel" / "PARTS").read_text().splitlines():
        if line.strip() and not line.startswith(("#", "author:")):
            name, count = line.split()
            out.append((name, int(count)))
    return out


def option_default(command: str, option: str) -> Tuple[str, ...]:
    """The default of `option` of the subcommand `command`, read from the
    command line's source (``sp = add("test", ...)`` then
    ``sp.add_argument("--modes", ..., default=list(attack_runs.TEST_MODES))``)
    without importing it, and evaluated over the harness modules it names."""
    for src in sorted((ROOT / "harness").rglob("*.py")):
        tree = ast.parse(src.read_text())
        for fn in ast.walk(tree):
            body, current = getattr(fn, "body", None), None
            for node in body if isinstance(body, list) else []:
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                    args = node.value.args
                    current = (args[0].value if args and isinstance(args[0], ast.Constant)
                               else None)
                call = node.value if isinstance(node, ast.Expr) else None
                if (current == command and isinstance(call, ast.Call)
                        and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "add_argument" and call.args
                        and isinstance(call.args[0], ast.Constant)
                        and call.args[0].value == option):
                    for kw in call.keywords:
                        if kw.arg == "default":
                            return _eval(kw.value, tree)
    raise AssertionError(f"no default for `./xpfo {command} {option}` in the harness")


def _eval(node: ast.expr, tree: ast.Module) -> Tuple[str, ...]:
    """A tuple of strings: literals, ``+``, ``list()``/``tuple()`` and a
    harness module's attribute (``attack_runs.TEST_MODES``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _eval(node.left, tree) + _eval(node.right, tree)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(x for e in node.elts for x in _eval(e, tree))
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("list", "tuple") and len(node.args) == 1):
        return _eval(node.args[0], tree)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        value = getattr(_module(node.value.id, tree), node.attr)
        return (value,) if isinstance(value, str) else tuple(value)
    raise AssertionError(f"cannot read {ast.unparse(node)} from the harness's source")


def _module(alias: str, tree: ast.Module) -> types.ModuleType:
    """The harness module `alias` names in `tree` (``from . import modes as m``)."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if (a.asname or a.name) == alias:
                    return importlib.import_module(f"harness.{a.name}")
    return importlib.import_module(f"harness.{alias}")


def test_kunit_cases_per_suite():
    cases = kunit_cases()
    assert set(cases) == {"xpfo", "xpfo_global", "pgtprot"}, cases
    claims = _claims(r"KUnit\s+suite\s+`(?P<suite>\w+)`\s+\((?P<n>\d+)\s+cases", raw=True)
    bad = [f"{where}: `{m['suite']}` has {cases.get(m['suite'])} cases, not {m['n']}"
           for where, m in claims if cases.get(m["suite"]) != int(m["n"])]
    assert not bad, "\n".join(bad)


def test_patches_per_series():
    series = dict(parts())
    bad = []
    for name, count in series.items():
        files = [p for p in (ROOT / "kernel" / "patches" / name).glob("*.patch")
                 if not p.name.startswith("0000-")]
        if len(files) != count:
            bad.append(f"kernel/PARTS: {name} {count}, but {len(files)} patches in its folder")
        cover = (ROOT / "kernel" / "patches" / name / "0000-cover-letter.patch").read_text()
        m = re.search(r"\[PATCH (v\d+ )?00/(\d+)\]", cover)
        if not m or int(m.group(2)) != count:
            bad.append(f"{name}/0000-cover-letter.patch: its subject does not say 00/{count}")
    for where, m in _claims(r"`(?:kernel/patches/)?(?P<part>\d+-[\w-]+)/`\]?(?:\([^)\s]*\))?\s+"
                            r"\((?P<n>\d+)\s+patches\b", raw=True):
        if series.get(m["part"]) != int(m["n"]):
            bad.append(f"{where}: {m['part']} has {series.get(m['part'])} patches, not {m['n']}")
    versions = {re.search(r"\[PATCH (v\d+)", (ROOT / "kernel" / "patches" / name /
                                              "0000-cover-letter.patch").read_text())[1]
                for name in series}
    for where, m in _claims(r"(?i)\bseries\s+(?P<v>v\d+)\b"):
        if {m["v"]} != versions:
            bad.append(f"{where}: series {m['v']}, but the cover letters say {versions}")
    assert not bad, "\n".join(bad)


def test_modes():
    xpfo, pgt = modes.XPFO_MODES, modes.PGT_MODES
    test_default = option_default("test", "--modes")
    bench_default = option_default("bench", "--modes")
    bad = []
    # the tables that describe each mode list exactly the harness's modes
    tables = 0
    for f, text in _raw_of():
        for m in re.finditer(r"^\| mode \| what it does \|.*\n\|[-| ]+\|\n((?:\|.*\n?)+)", text,
                             re.M):
            tables += 1
            rows = tuple(re.findall(r"^\| `([\w+-]+)` \|", m.group(1), re.M))
            if rows not in (xpfo, pgt):
                bad.append(f"{_rel(f)}: a modes table lists {rows}, not {xpfo} or {pgt}")
    assert tables, "no table of the modes in the docs any more: update tests/test_docs.py"
    checks = [
        (r"the\s+(?P<n>" + NUM + r")\s+XPFO\s+modes", len(xpfo), "XPFO modes"),
        (r"`\./xpfo test`\s+runs\s+(?:all\s+)?(?P<n>" + NUM + r")(?:\s+modes)?",
         len(test_default), "modes `./xpfo test` runs by default"),
        (r"default\s+full\s+run:\s+(?P<n>" + NUM + r")\s+modes", len(bench_default),
         "modes `./xpfo bench` runs by default"),
    ]
    for pattern, want, what in checks:
        for where, m in _claims(pattern, raw=True):
            if _number(m["n"]) != want:
                bad.append(f"{where}: {m['n']} {what}, the harness has {want}")
    assert not bad, "\n".join(bad)


def test_demo_modes():
    """What the docs say `./xpfo demo` boots and benchmarks (harness/demo.py)."""
    demo = importlib.import_module("harness.demo")
    bad = []
    for where, m in _claims(r"`\./xpfo demo`[^.]*?\((?P<list>`[\w+-]+`(?:,\s+`[\w+-]+`)+)\)",
                            raw=True):
        stated = tuple(re.findall(r"`([\w+-]+)`", m["list"]))
        if stated != tuple(demo.ATTACK_MODES):
            bad.append(f"{where}: the demo boots {stated}, harness/demo.py {demo.ATTACK_MODES}")
    for where, m in _claims(r"\./xpfo bench --quick --modes (?P<modes>[\w+ -]+?) --cpus "
                            r"(?P<cpus>[\d ]+?) --rounds (?P<rounds>\d+)\s+# the demo's version:\s+"
                            r"(?P<n>" + NUM + r")\s+modes", raw=True):
        stated = (tuple(m["modes"].split()), tuple(int(c) for c in m["cpus"].split()),
                  int(m["rounds"]), _number(m["n"]))
        bench_modes = _one(demo, "BENCH_MODES")
        want = (tuple(bench_modes), tuple(_one(demo, "BENCH_CPUS")), _one(demo, "BENCH_ROUNDS"),
                len(bench_modes))
        if stated != want:
            bad.append(f"{where}: the demo's benchmark {stated}, harness/demo.py {want}")
    assert not bad, "\n".join(bad)


def _one(module: types.ModuleType, suffix: str):
    """The one module-level name of `module` that ends with `suffix`
    (``QUICK_BENCH_MODES``)."""
    names = [n for n in vars(module) if n.endswith(suffix)]
    assert len(names) == 1, f"{module.__name__}: {names} end with {suffix}"
    return getattr(module, names[0])


def test_machine_kinds():
    kinds = tuple(machines.KINDS)
    bad = []
    for where, m in _claims(r"\b(?P<n>" + NUM + r")\s+machine\s+kinds"):
        if _number(m["n"]) != len(kinds):
            bad.append(f"{where}: {m['n']} machine kinds, harness/machines.py has {len(kinds)}")
    tables = 0
    for f in _md_files(results=False):
        for m in re.finditer(r"^\| (?:kind|machine) \| emulator, CPU \|.*\n\|[-| ]+\|\n"
                             r"((?:\|.*\n?)+)", f.read_text(), re.M):
            tables += 1
            rows = tuple(re.findall(r"^\| `([\w-]+)`", m.group(1), re.M))
            if rows != kinds:
                bad.append(f"{_rel(f)}: a machine table lists {rows}, not {kinds}")
    assert tables, "no table of machine kinds in the docs any more: update tests/test_docs.py"
    assert not bad, "\n".join(bad)


def test_selftest_time_limits():
    default = next(f.default for f in dataclasses.fields(selftests.Program)
                   if f.name == "timeout")
    limits = {p.id: p.timeout for p in selftests.PROGRAMS}
    special = {k: v for k, v in limits.items() if v != default}
    bad = []
    for where, m in _claims(r"`timeout -s KILL`\s+\((?P<list>[^)]*)\)", raw=True):
        text = m["list"]
        stated_default = re.match(r"\s*(\d+)\s+s\b", text)
        stated = {k: int(v) for k, v in re.findall(r"`([\w:-]+)`\s+(\d+)\s+s\b", text)}
        if not stated_default or int(stated_default.group(1)) != default:
            bad.append(f"{where}: default limit {text!r}, harness/selftests.py has {default} s")
        if stated != special:
            bad.append(f"{where}: limits {stated}, harness/selftests.py has {special}")
    for where, m in _claims(r"`(?P<id>[\w:-]+)`(?:'s\s+limit\s+(?:is\s+now|is|raised\s+to)|"
                            r"\s+\(cut\s+at)\s+(?P<s>\d+)\s+s\b", raw=True):
        if limits.get(m["id"]) != int(m["s"]):
            bad.append(f"{where}: {m['id']} {m['s']} s, harness/selftests.py has "
                       f"{limits.get(m['id'])}")
    assert not bad, "\n".join(bad)
