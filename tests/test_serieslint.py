"""`./xpfo series-lint` (harness/serieslint.py): on small synthetic series,
and on kernel/patches against harness/serieslint_known.txt."""

import re
import shutil
from collections import Counter
from pathlib import Path
from typing import List, Tuple

import pytest

from conftest import ROOT
from harness import cli, serieslint

SUBJECT = "mm/xpfo: add a thing"


def patch(n: int, subject: str = SUBJECT, body: str = "Do it.",
          files: Tuple[Tuple[str, List[str]], ...] = ()) -> str:
    """A format-patch mail; each file a hunk of ' '/'+'/'-' lines."""
    out = ["From 0 Mon Sep 17 00:00:00 2001", "From: dev <dev@localhost>",
           f"Subject: [PATCH {n:02d}/09] {subject}", "", body, "",
           "Signed-off-by: dev <dev@localhost>", "---"]
    for name, lines in files:
        old = sum(ln[0] in " -" for ln in lines)
        new = sum(ln[0] in " +" for ln in lines)
        out += [f"diff --git a/{name} b/{name}", f"--- a/{name}", f"+++ b/{name}",
                f"@@ -1,{old} +1,{new} @@ f(void)", *lines]
    return "\n".join(out + ["-- ", "2.39.5", ""])


def lint(tmp_path: Path, *patches: str) -> List[serieslint.Finding]:
    (tmp_path / "kernel" / "patches" / "1-x").mkdir(parents=True)
    (tmp_path / "kernel" / "PARTS").write_text(f"1-x {len(patches)}\n")
    for n, text in enumerate(patches, 1):
        (tmp_path / "kernel" / "patches" / "1-x" / f"{n:04d}-p.patch").write_text(text)
    return serieslint.check(tmp_path)


def kinds(findings: List[serieslint.Finding]) -> List[Tuple[str, int]]:
    return [(f.kind, f.patch) for f in findings]


def test_a_later_patch_removing_an_earlier_ones_line_is_found(tmp_path):
    found = lint(tmp_path,
                 patch(1, files=(("mm/a.c", [" int x;", "+\tif (xpfo_on())", "+\t\tgo();",
                                             "+}"]),)),
                 patch(2, files=(("mm/b.c", ["-\tif (xpfo_on())"]),)),   # another file
                 patch(3, files=(("mm/a.c", ["-  if (xpfo_on())", "+\tif (xpfo_off())",
                                             "-}", "+}", " \t\tgo();"]),)))
    assert kinds(found) == [("rewrite", 3)]
    f = found[0]
    assert (f.file, f.text, f.earlier) == ("mm/a.c", "if (xpfo_on())", 1)
    assert f.key == "rewrite 1-x 3 mm/a.c if (xpfo_on())"
    assert "that patch 1 added" in serieslint.table(found)


def test_a_line_of_the_base_tree_removed_is_no_finding(tmp_path):
    found = lint(tmp_path,
                 patch(1, files=(("mm/a.c", ["+\tnew();", " \told();"]),)),
                 patch(2, files=(("mm/a.c", ["-\told();", " \tnew();"]),)))
    assert found == []


def test_the_signature_is_no_removed_line(tmp_path):
    # the mail's last lines "-- " and "2.39.5" follow the hunk: read as
    # hunk lines, "-- " would remove the "-" patch 1 adds
    found = lint(tmp_path, patch(1, files=(("a.rst", ["+-", "+text"]),)),
                 patch(2, files=(("a.rst", [" text"]),)))
    assert found == []


@pytest.mark.parametrize("subject, want", [
    ("mm/xpfo: add KUnit tests", []),
    ("x86/mm/pgtprot: Write-protect page tables", []),
    ("x86/mm: pgtprot: write-protect page tables", ["subject-case"]),
    ("x86/mm: INVLPG goes", []),
    ("block, fs, drivers: reach the page cache", []),
    ("mm: XPFO keeps the frame", []),
    ("mm: KUnit cases", []),
    ("fs: page_address() goes", []),
    ("mm: Add a thing", ["subject-case"]),
    ("net: no direct-map address", ["subject-verb"]),
    ("mm/xpfo: a lasting alias", ["subject-verb"]),
    ("Documentation: pgtprot: every alias", ["subject-verb"]),
    ("add a thing without a prefix", ["subject-form"]),
    ("mm: " + "x" * 72, ["subject-length"]),
    ("mm: fix the flush", ["fixes-tag"]),
])
def test_subject_rules(tmp_path, subject, want):
    assert [f.kind for f in lint(tmp_path, patch(1, subject))] == want


def test_folded_subject_is_read_whole(tmp_path):
    text = patch(1, "fs: map symlink bodies with kmap_local in affs, befs,").replace(
        "befs,\n", "befs,\n coda, efs, f2fs, fuse, hpfs, isofs, udf\n", 1)
    found = lint(tmp_path, text)
    assert kinds(found) == [("subject-length", 1)]
    assert found[0].text == ("fs: map symlink bodies with kmap_local in affs, befs, "
                             "coda, efs, f2fs, fuse, hpfs, isofs, udf")


def test_a_fix_carries_a_fixes_trailer(tmp_path):
    fixes = 'Fixes: 0123456789ab ("mm: add a thing")\n'
    found = lint(tmp_path, patch(1, body="This fixes the flush."),
                 patch(2, body="This fixes the flush.\n" + fixes),
                 patch(3, body="Prefixes and fixed-size maps say nothing."))
    assert kinds(found) == [("fixes-tag", 1)]


def test_known_list_compare_both_ways():
    a = serieslint.Finding("subject-verb", "1-x", 2)
    b = serieslint.Finding("rewrite", "1-x", 3, "mm/a.c", "x();", 1)
    new, gone = serieslint.compare([a, b, b], [b.key, "subject-length 1-x 9", a.key])
    assert new == [b] and gone == ["subject-length 1-x 9"]


def test_the_series_has_the_known_findings_only():
    """A finding not in harness/serieslint_known.txt fails (fix the patch,
    or list it if the next re-cut removes it); a line there that no longer
    occurs fails too, so that the list shrinks as the re-cut fixes them."""
    new, gone = serieslint.compare(serieslint.check(ROOT), serieslint.read_known())
    assert not new, ("findings not in harness/serieslint_known.txt:\n"
                     + serieslint.table(new))
    assert not gone, ("no longer found: delete these lines from "
                      "harness/serieslint_known.txt:\n" + "\n".join(gone))


def test_the_known_list_check_can_fail(tmp_path):
    """The comparison on a synthetic series with one rewrite, against an
    empty list and against a list that also names a finding that does not
    occur; and the real series against its list plus a made-up line."""
    found = lint(tmp_path,
                 patch(1, files=(("mm/a.c", ["+\tgo();"]),)),
                 patch(2, files=(("mm/a.c", ["-\tgo();", "+\tstop();"]),)))
    assert [f.key for f in found] == ["rewrite 1-x 2 mm/a.c go();"]
    new, gone = serieslint.compare(found, [])
    assert new == found and gone == []
    new, gone = serieslint.compare(found, [found[0].key, "subject-length 1-x 9"])
    assert new == [] and gone == ["subject-length 1-x 9"]
    copy = tmp_path / "known.txt"
    shutil.copy(serieslint.KNOWN, copy)
    copy.write_text(copy.read_text() + "subject-length 1-xpfo 99\n")
    new, gone = serieslint.compare(serieslint.check(ROOT), serieslint.read_known(copy))
    assert new == [] and gone == ["subject-length 1-xpfo 99"]


def test_cli_exit_status(monkeypatch, capsys, tmp_path):
    assert cli.main(["series-lint"]) == 0
    stale = tmp_path / "known.txt"
    stale.write_text("# a finding the series does not have\nsubject-length 1-xpfo 99\n")
    monkeypatch.setattr(serieslint, "KNOWN", stale)
    assert cli.main(["series-lint"]) == 1
    assert "no longer found" in capsys.readouterr().out




def test_series_doc_counts_the_known_findings():
    """docs/SERIES.md's "Mechanical checks": the list's size, and each kind's."""
    text = re.sub(r"\s+", " ", (ROOT / "docs" / "SERIES.md").read_text())
    m = re.search(r"lists (\d+|no) known findings", text)
    assert m, "docs/SERIES.md no longer counts the known findings: update this test"
    kinds = Counter(key.split()[0] for key in serieslint.read_known())
    assert set(kinds) <= {"rewrite"}, f"known findings other than rewrites: {kinds}"
    said = 0 if m.group(1) == "no" else int(m.group(1))
    assert said == sum(kinds.values()), \
        f"docs/SERIES.md counts {m.group(1)}, harness/serieslint_known.txt {sum(kinds.values())}"
