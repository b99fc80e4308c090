"""./xpfo export --author: the identity, its From: header as git writes it,
the rewrite of a patch's From: and sign-offs (and nothing else), the
default export unchanged byte for byte, kernel/PARTS' author: line and the
command line's refusal of a bad identity."""

import os
import re
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import ROOT
from harness import author, cli, source
from harness.author import PLACEHOLDER, Identity
from harness.errors import HarnessError
from harness.paths import Layout

DATE = "2026-11-20T10:00:00+0000"
SOB = f"Signed-off-by: {PLACEHOLDER}"
SIG = "-- "                                 # the signature line, with its space


def _git(cwd: Path, *args: str, who: Identity = PLACEHOLDER) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": DATE, "GIT_COMMITTER_DATE": DATE,
           "GIT_AUTHOR_NAME": who.name, "GIT_AUTHOR_EMAIL": who.email,
           "GIT_COMMITTER_NAME": who.name, "GIT_COMMITTER_EMAIL": who.email}
    return subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=cwd, check=True,
                          capture_output=True, text=True, env=env).stdout


def _commit(cwd: Path, subject: str, body: str, trailers: List[str],
            who: Identity = PLACEHOLDER) -> None:
    f = cwd / "mm" / "page_alloc.c"
    f.write_text(f.read_text() + f"{subject}\n")
    _git(cwd, "commit", "-q", "-a", "--cleanup=verbatim", "-m",
         "\n\n".join([subject, body, "\n".join(trailers)]) + "\n", who=who)


# ---------------------------------------------------------------------------
# the identity

@pytest.mark.parametrize("text, want", [
    ("Jane Doe <jane@example.org>", Identity("Jane Doe", "jane@example.org")),
    ("  Jane Doe   <jane@example.org>  ", Identity("Jane Doe", "jane@example.org")),
    ('"Doe, Jane" <jane@example.org>', Identity("Doe, Jane", "jane@example.org")),
    ("Jörg Rödel <joro@example.org>", Identity("Jörg Rödel", "joro@example.org")),
])
def test_identity_parses(text, want):
    assert author.parse(text) == want
    assert str(author.parse(str(want))) == str(want)


@pytest.mark.parametrize("text, why", [
    ("", "no address in <...>"),
    ("Jane Doe", "no address in <...>"),
    ("jane@example.org", "no address in <...>"),
    ("<jane@example.org>", "no name before the address"),
    ("'' <jane@example.org>", "no name before the address"),
    ("Jane <jane>", "is no address of the form user@host"),
    ("Jane <jane doe@example.org>", "is no address of the form user@host"),
    ("Jane <a@b@c>", "is no address of the form user@host"),
    ("Jane <jane@example.org> (work)", "one address in <...> at the end"),
    ("Jane <a@b> <c@d>", "one address in <...> at the end"),
    ("Jane\nDoe <jane@example.org>", "a line break"),
    ("Jane Doe <jane@example.org>\n", "a line break"),
    ("Jane\tDoe <jane@example.org>", "a control character"),
    ("jane@home <jane@example.org>", "an '@' in the name"),
    ("J" * 61 + " <jane@example.org>", "a name over 60 bytes"),
    ("Jö" * 21 + " <jane@example.org>", "a name over 60 bytes"),
])
def test_bad_identity_is_one_clear_error(text, why):
    with pytest.raises(HarnessError) as e:
        author.parse(text)
    assert why in e.value.what and repr(text) in e.value.what
    assert "Name <user@example.org>" in e.value.hint


# ---------------------------------------------------------------------------
# the rewrite against git: a series made by the placeholder and rewritten
# is the series git writes when the author made and signed it

# the last two are longer than parse() lets through (git am would not take
# them), but git format-patch writes them, folded, and so does the rewrite
NAMES = ["Jane Doe", "J. Random Hacker", "Jörg Rödel", "A" * 60,
         "Ünïcödé Long Name That Folds Past 76 Columns",
         "A Very Long Name That Goes On And On Beyond Seventy Eight Columns Of Header",
         "Ünïcödé Long Name With Many Words To Fold Past Seventy Six Columns Too"]


def _repo(tmp: Path) -> Path:
    work = tmp / "w"
    (work / "mm").mkdir(parents=True)
    (work / "mm" / "page_alloc.c").write_text("".join(f"line {i}\n" for i in range(10)))
    _git(work, "init", "-q", "-b", "master")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "base")
    _git(work, "tag", "base")
    return work


def _series(work: Path, who: Identity) -> Dict[str, str]:
    """Two commits by `who`, one with another person's trailers too; the
    patches git format-patch writes of them, by name."""
    _git(work, "reset", "-q", "--hard", "base")
    _commit(work, "mm: first", "Change the first thing.", [f"Signed-off-by: {who}"], who)
    _commit(work, "mm: second", "Change the second thing.",
            ["Reported-by: Rae Porter <rae@example.org>",
             "Signed-off-by: Sam Other <sam@example.org>",
             f"Signed-off-by: {who}"], who)
    out = work.parent / f"out-{abs(hash(str(who)))}"
    _git(work, "format-patch", "-q", "--no-signature", "--zero-commit", "--base", "base",
         "-o", str(out), "base..HEAD")
    return {p.name: p.read_text() for p in sorted(out.glob("*.patch"))}


@pytest.mark.parametrize("name", NAMES)
def test_rewrite_is_what_git_writes_for_the_author(tmp_path, name):
    work = _repo(tmp_path)
    who = Identity(name, "someone.with.a.long.address@example.org")
    made = _series(work, PLACEHOLDER)
    want = _series(work, who)
    assert list(made) == list(want)
    for patch in made:
        assert author.rewrite(made[patch], who) == want[patch], patch
    # git am takes the rewritten patch as the author's
    if len(name.encode()) > author.MAX_NAME:
        return
    _git(work, "reset", "-q", "--hard", "base")
    mbox = tmp_path / "series.mbox"
    mbox.write_text("".join(author.rewrite(t, who) for t in made.values()))
    _git(work, "am", "-q", str(mbox))
    got = _git(work, "log", "-2", "--format=%an <%ae>%n%(trailers:key=Signed-off-by)")
    assert str(PLACEHOLDER) not in got
    assert got.count(str(who)) == 4            # two authors, two sign-offs


@pytest.mark.parametrize("name", NAMES)
def test_from_header_is_gits(name):
    ident = Identity(name, "someone.with.a.long.address@example.org")
    header = author.from_header(ident)
    assert header.startswith("From: ") and header.endswith(f" <{ident.email}>\n")
    assert all(len(line) <= 78 for line in header.splitlines())
    assert author.from_header(PLACEHOLDER) == f"From: {PLACEHOLDER}\n"


SAMPLE = f"""\
From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: {PLACEHOLDER}
Date: Thu, 26 Nov 2026 09:48:11 +0000
Subject: [PATCH 03/24] checkpatch: accept the sign-off of a placeholder
 identity

The check used to stop at the first line of the form

{SOB}

in a changelog; this one quotes it on purpose.

Reviewed-by: Rae Porter <rae@example.org>
Signed-off-by: Sam Other <sam@example.org>
{SOB}
Cc: stable@vger.kernel.org # 6.12
---
 scripts/checkpatch.pl | 2 ++
 1 file changed, 2 insertions(+)

diff --git a/scripts/checkpatch.pl b/scripts/checkpatch.pl
index 1111111..2222222 100644
--- a/scripts/checkpatch.pl
+++ b/scripts/checkpatch.pl
@@ -1,2 +1,4 @@
 # {SOB}
+# {SOB}
+{SOB}
 my $x;
{SIG}
2.39.5

"""


def test_rewrite_touches_the_header_and_the_trailer_block_only():
    who = Identity("Jane Doe", "jane@example.org")
    new = author.rewrite(SAMPLE, who)
    old_lines, new_lines = SAMPLE.splitlines(), new.splitlines()
    assert len(old_lines) == len(new_lines)
    changed = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
    assert changed == [(f"From: {PLACEHOLDER}", f"From: {who}"),
                       (SOB, f"Signed-off-by: {who}")]
    # the sign-off quoted in the prose and those in the diff are the same as before
    assert new.count(SOB) == 4
    assert new.index(f"Signed-off-by: {who}") > new.index("Signed-off-by: Sam Other")


def test_rewrite_keeps_another_persons_patch_and_the_mbox_line():
    who = Identity("Jane Doe", "jane@example.org")
    theirs = SAMPLE.replace(f"From: {PLACEHOLDER}", "From: Sam Other <sam@example.org>")
    new = author.rewrite(theirs, who)
    assert "From: Sam Other <sam@example.org>\n" in new
    assert new.startswith("From 0000000000000000000000000000000000000000 Mon Sep 17")
    assert f"Signed-off-by: {who}\nCc:" in new          # our own sign-off is ours


def test_rewrite_of_a_cover_letter():
    cover = (f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
             f"From: {PLACEHOLDER}\nSubject: [PATCH v2 00/24] mm: XPFO\n\n"
             f"Quoting: {SOB}\nxpfo-dev (2): is no shortlog here\n\n"
             f"xpfo-dev (2):\n  mm: first\n  mm: second\n\n"
             f"base-commit: the base\n{SIG}\n2.39.5\n")
    who = Identity("Jane Doe", "jane@example.org")
    new = author.rewrite(cover, who)
    assert new == cover.replace(f"From: {PLACEHOLDER}\n", f"From: {who}\n").replace(
        "xpfo-dev (2):\n  mm:", "Jane Doe (2):\n  mm:")
    # a name that is not ASCII: encoded in the header, 8 bits in the body
    who = Identity("Jörg Rödel", "joro@example.org")
    new = author.rewrite(cover, who)
    assert "From: =?UTF-8?q?J=C3=B6rg=20R=C3=B6del?= <joro@example.org>\n" in new
    assert "\nJörg Rödel (2):\n" in new and new.count("MIME-Version") == 1
    # only the header changed: no MIME headers
    plain = cover.replace("xpfo-dev (2):\n ", "Sam (2):\n ")
    assert "MIME-Version" not in author.rewrite(plain, who)


def test_a_non_ascii_sign_off_adds_gits_mime_headers_once():
    who = Identity("Jörg Rödel", "joro@example.org")
    new = author.rewrite(SAMPLE, who)
    head = new.split("\n\n", 1)[0]
    assert head.endswith(" identity\n" + "".join(author.MIME).rstrip("\n"))
    assert author.rewrite(new.replace(f"Signed-off-by: {who}", SOB), who) == new


def test_no_author_and_the_placeholder_leave_the_text_as_it_is(tmp_path):
    assert author.rewrite(SAMPLE, PLACEHOLDER) == SAMPLE
    f = tmp_path / "p.patch"
    data = SAMPLE.encode() + b"\xff\xfe not UTF-8\n"
    f.write_bytes(data)
    for who in (None, PLACEHOLDER):
        author.rewrite_file(f, who)
        assert f.read_bytes() == data
    author.rewrite_file(f, Identity("Jane Doe", "jane@example.org"))
    assert f.read_bytes().endswith(b"\xff\xfe not UTF-8\n")


def test_the_series_rewritten_changes_only_from_sign_offs_and_shortlog():
    """Every patch and cover letter of kernel/patches: the rewrite changes
    the placeholder's From:, sign-offs and shortlog line, line for line,
    and nothing else."""
    who = Identity("Jane Doe", "jane@example.org")
    files = sorted((ROOT / "kernel" / "patches").rglob("*.patch"))
    assert files
    for f in files:
        old = f.read_bytes().decode("utf-8", "surrogateescape")
        new = author.rewrite(old, who)
        for a, b in zip(old.splitlines(), new.splitlines(), strict=True):
            if a != b:
                assert (a, b) in ((f"From: {PLACEHOLDER}", f"From: {who}"),
                                  (SOB, f"Signed-off-by: {who}")) or \
                    (a.startswith(f"{PLACEHOLDER.name} (") and
                     b == a.replace(PLACEHOLDER.name, who.name)), f.name
        assert f"From: {PLACEHOLDER}\n" not in new.split("\n\n", 1)[0], f.name
    # as the series stands: no From:, sign-off or shortlog of the
    # placeholder left (its address in MAINTAINERS is code: the diff's)
    name = re.escape(PLACEHOLDER.name)
    left = re.compile(rf"^(?:(?:From|Signed-off-by): .*{name}|{name} \(\d+\):)", re.M)
    assert all(left.search(f.read_text(errors="replace")) for f in files)
    assert not [f.name for f in files
                if left.search(author.rewrite(f.read_text(errors="replace"), who))]


# ---------------------------------------------------------------------------
# ./xpfo export on a fixture: build/src as prepare() leaves it

@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    root = tmp_path / "repo"
    (root / "kernel" / "patches" / "1-first").mkdir(parents=True)
    (root / "kernel" / "BASE").write_text("package=linux-source-test\nversion=1.0\n"
                                          "tarball=linux-source-test.tar.xz\n")
    (root / "kernel" / "PARTS").write_text("# folder, patches\n1-first 2\n")
    (root / "kernel" / "patches" / "1-first" / "0000-cover-letter.patch").write_text(
        f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: {PLACEHOLDER}\nSubject: [PATCH 0/2] mm: two\n\nWhy.\n{SIG}\n2.39.5\n")
    src = Layout(root=root).src
    (src / "mm").mkdir(parents=True)
    (src / "mm" / "page_alloc.c").write_text("".join(f"line {i}\n" for i in range(10)))
    _git(src, "init", "-q", "-b", "master")
    for k, v in source.TREE_CONFIG:
        _git(src, "config", k, v)
    _git(src, "add", "-A")
    _git(src, "commit", "-qm", "base")
    _git(src, "tag", source.BASE_TAG)
    _commit(src, "mm: first", f"It quotes\n\n{SOB}\n\nin its prose.", [SOB])
    _commit(src, "mm: second", "Two.", ["Reviewed-by: Rae Porter <rae@example.org>", SOB])
    return Layout(root=root)


def _tree(layout: Layout) -> Dict[str, bytes]:
    return {str(p.relative_to(layout.patches)): p.read_bytes()
            for p in sorted(layout.patches.rglob("*")) if p.is_file()}


def test_export_without_author_is_format_patch_as_before(layout, tmp_path):
    # what the export wrote before --author existed: git format-patch of
    # each series with these options, the cover letter copied as it is
    before = tmp_path / "before"
    _git(layout.src, "format-patch", "-q", "--no-signature", "--zero-commit", "--base",
         source.BASE_TAG, "-o", str(before / "1-first"), f"{source.BASE_TAG}..HEAD")
    cover = layout.patches / "1-first" / "0000-cover-letter.patch"
    (before / "1-first" / cover.name).write_bytes(cover.read_bytes())
    want = {str(p.relative_to(before)): p.read_bytes()
            for p in sorted(before.rglob("*")) if p.is_file()}
    source.export(layout)
    assert _tree(layout) == want
    assert b"Signed-off-by: xpfo-dev" in want["1-first/0001-mm-first.patch"]


def test_export_with_author_then_without(layout, capsys):
    source.export(layout)
    plain = _tree(layout)
    who = Identity("Jane Doe", "jane@example.org")
    source.export(layout, author=who)
    signed = _tree(layout)
    assert f"from {who}" in capsys.readouterr().out
    assert set(signed) == set(plain)
    for name in plain:
        assert signed[name] == author.rewrite(plain[name].decode(), who).encode(), name
        assert f"From: {who}\n".encode() in signed[name]
    first = signed["1-first/0001-mm-first.patch"].decode()
    assert first.count(SOB) == 1 and first.count(f"Signed-off-by: {who}") == 1
    assert "Reviewed-by: Rae Porter" in signed["1-first/0002-mm-second.patch"].decode()
    # the commits of build/src are still the placeholder's: a plain export
    # writes the patches as before; the cover letter keeps what it has
    source.export(layout)
    again = _tree(layout)
    cover = "1-first/0000-cover-letter.patch"
    assert {k: v for k, v in again.items() if k != cover} == \
        {k: v for k, v in plain.items() if k != cover}
    assert again[cover] == signed[cover]


def test_parts_author_line_is_the_default_and_the_option_wins(layout):
    parts = layout.kernel_dir / "PARTS"
    parts.write_text("# folder, patches\nauthor: Jane Doe <jane@example.org>\n1-first 2\n")
    assert [p.name for p in source.read_parts(layout)] == ["1-first"]
    assert source.read_author(layout) == Identity("Jane Doe", "jane@example.org")
    source.export(layout)
    assert "From: Jane Doe <jane@example.org>\n" in \
        (layout.patches / "1-first" / "0002-mm-second.patch").read_text()
    source.export(layout, author=Identity("Sam Other", "sam@example.org"))
    text = (layout.patches / "1-first" / "0002-mm-second.patch").read_text()
    assert "From: Sam Other <sam@example.org>\n" in text and "Jane Doe" not in text


def test_bad_parts_author_line_names_the_line_and_writes_nothing(layout):
    before = _tree(layout)
    parts = layout.kernel_dir / "PARTS"
    parts.write_text("1-first 2\nauthor: Jane Doe\n")
    with pytest.raises(HarnessError, match=r"PARTS:2: author: 'Jane Doe': no address"):
        source.export(layout)
    parts.write_text("author: A <a@b.org>\nauthor: B <b@b.org>\n1-first 2\n")
    with pytest.raises(HarnessError, match=r"PARTS:2: a second author: line"):
        source.export(layout)
    assert _tree(layout) == before
    assert not layout.patches.with_name("patches.tmp").exists()


@pytest.mark.parametrize("bad", ["Jane Doe", "<jane@example.org>", "Jane <jane>",
                                 "Jane\nDoe <jane@example.org>", ""])
def test_cli_refuses_a_bad_author_before_writing(bad, capsys, monkeypatch):
    monkeypatch.setattr(source, "export", lambda *a, **kw: pytest.fail("exported"))
    assert cli.main(["export", "--author", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and err.startswith("error: --author ")
    assert "hint: give the identity as" in err


def test_cli_passes_the_author_on(monkeypatch):
    got = []
    monkeypatch.setattr(source, "export", lambda layout, author=None: got.append(author))
    assert cli.main(["export", "--author", "Jane Doe <jane@example.org>"]) == 0
    assert cli.main(["export"]) == 0
    assert got == [Identity("Jane Doe", "jane@example.org"), None]
