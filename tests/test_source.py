"""The base + series round trip, and how a patch that does not apply is reported."""

import subprocess
import tarfile
from pathlib import Path

import pytest

from harness import source
from harness.errors import HarnessError
from harness.paths import Layout

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def _make_base(tmp: Path) -> Path:
    base = tmp / "linux-source-test"
    (base / "mm").mkdir(parents=True)
    (base / "mm" / "page_alloc.c").write_text("".join(f"line {i}\n" for i in range(40)))
    (base / "Makefile").write_text("VERSION = 6\n")
    tarball = tmp / "linux-source-test.tar.xz"
    with tarfile.open(tarball, "w:xz") as tf:
        tf.add(base, arcname="linux-source-test")
    return tarball


def _make_patch(tmp: Path, tarball: Path, old: str, new: str, name: str) -> Path:
    work = tmp / f"work-{name}"
    work.mkdir()
    subprocess.run(["tar", "-xf", str(tarball), "-C", str(work), "--strip-components=1"],
                   check=True)
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "base")
    f = work / "mm" / "page_alloc.c"
    f.write_text(f.read_text().replace(old, new))
    _git(work, "commit", "-qam", f"mm: {name}")
    out = tmp / f"out-{name}"
    _git(work, "format-patch", "-q", "-o", str(out), "HEAD~1")
    return next(out.glob("*.patch"))


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    tarball = _make_base(tmp_path)
    root = tmp_path / "repo"
    (root / "kernel" / "patches").mkdir(parents=True)
    (root / "kernel" / "BASE").write_text(
        f"package=linux-source-test\nversion=1.0\ntarball={tarball}\n")
    return Layout(root=root)


def test_series_applies_as_commits_and_exports_back(layout: Layout, tmp_path: Path):
    tarball = source.read_base(layout).tarball
    p = _make_patch(tmp_path, tarball, "line 10\n", "line ten\n", "first")
    (layout.patches / "0001-mm-first.patch").write_bytes(p.read_bytes())
    src = source.prepare(layout)
    assert "line ten" in (src / "mm" / "page_alloc.c").read_text()
    log = _git(src, "log", "--format=%s")
    assert log.splitlines() == ["mm: first", "linux-source-test 1.0"]
    # a second prepare with nothing changed reuses the tree
    assert source.prepare(layout) == src
    # edit in the tree, commit, export: the series now has two patches
    f = src / "mm" / "page_alloc.c"
    f.write_text(f.read_text().replace("line 20\n", "line twenty\n"))
    _git(src, "commit", "-qam", "mm: second")
    names = [p.name for p in source.export(layout)]
    assert names == ["0001-mm-first.patch", "0002-mm-second.patch"]
    assert "line twenty" in (layout.patches / "0002-mm-second.patch").read_text()


def test_failing_patch_is_named_with_its_hunk(layout: Layout, tmp_path: Path):
    tarball = source.read_base(layout).tarball
    good = _make_patch(tmp_path, tarball, "line 10\n", "line ten\n", "good")
    bad = _make_patch(tmp_path, tarball, "line 30\n", "line thirty\n", "bad")
    text = bad.read_text().replace(" line 29\n", " line 29 changed upstream\n")
    (layout.patches / "0001-mm-good.patch").write_bytes(good.read_bytes())
    (layout.patches / "0002-mm-bad.patch").write_text(text)
    with pytest.raises(HarnessError) as e:
        source.prepare(layout)
    msg = str(e.value)
    assert "0002-mm-bad.patch does not apply" in msg
    assert "mm/page_alloc.c" in msg
    # nothing is left that a later run would take for a good tree
    assert not (layout.src / source.STAMP).exists()


def test_version_mismatch_warns(layout: Layout, capsys):
    source.check_base(source.read_base(layout))
    assert "linux-source-test installed is unknown" in capsys.readouterr().err


def test_missing_source_fails_clearly(tmp_path: Path):
    root = tmp_path / "r"
    (root / "kernel").mkdir(parents=True)
    (root / "kernel" / "BASE").write_text(
        "package=linux-source-test\nversion=1\ntarball=/nonexistent.tar.xz\n")
    with pytest.raises(HarnessError, match="is missing"):
        source.prepare(Layout(root=root))


def test_local_commits_and_edits_are_not_dropped(layout: Layout, tmp_path: Path):
    tarball = source.read_base(layout).tarball
    p = _make_patch(tmp_path, tarball, "line 10\n", "line ten\n", "first")
    (layout.patches / "0001-mm-first.patch").write_bytes(p.read_bytes())
    src = source.prepare(layout)
    f = src / "mm" / "page_alloc.c"
    f.write_text(f.read_text().replace("line 20\n", "line twenty\n"))
    _git(src, "commit", "-qam", "mm: local work")
    # the series changes under the tree (a pull, an edited patch): prepare
    # would rebuild build/src from kernel/patches, and must refuse
    q = _make_patch(tmp_path, tarball, "line 5\n", "line five\n", "second")
    (layout.patches / "0002-mm-second.patch").write_bytes(q.read_bytes())
    with pytest.raises(HarnessError, match="not in kernel/patches") as e:
        source.prepare(layout)
    assert "./xpfo export" in str(e.value)
    assert _git(src, "log", "-1", "--format=%s").strip() == "mm: local work"
    # an uncommitted edit is refused in the same way
    _git(src, "reset", "-q", "--hard", "HEAD~1")
    f.write_text(f.read_text() + "uncommitted\n")
    with pytest.raises(HarnessError, match="not in kernel/patches"):
        source.prepare(layout)
    assert f.read_text().endswith("uncommitted\n")
    # --force drops both
    src = source.prepare(layout, force=True)
    assert "line five" in f.read_text() and "uncommitted" not in f.read_text()
    assert _git(src, "log", "--format=%s").splitlines()[:2] == ["mm: second", "mm: first"]


def test_base_commit_is_the_same_everywhere_and_new_commits_are_the_series(tmp_path: Path):
    tarball = _make_base(tmp_path)
    heads = []
    for name in ("a", "b"):
        root = tmp_path / name
        (root / "kernel" / "patches").mkdir(parents=True)
        (root / "kernel" / "BASE").write_text(
            f"package=linux-source-test\nversion=1.0\ntarball={tarball}\n")
        src = source.prepare(Layout(root=root))
        heads.append(_git(src, "rev-parse", source.BASE_TAG).strip())
    # the "base-commit:" line of an export does not depend on the machine
    assert heads[0] == heads[1]
    f = src / "Makefile"
    f.write_text("VERSION = 7\n")
    subprocess.run(["git", "commit", "-qam", "bump"], cwd=src, check=True,
                   capture_output=True)
    assert _git(src, "log", "-1", "--format=%an <%ae>").strip() == "xpfo-dev <xpfo-dev@localhost>"
    assert _git(src, "config", "core.abbrev").strip() == "7"


def test_two_series_apply_in_parts_order_and_export_back(layout: Layout, tmp_path: Path):
    tarball = source.read_base(layout).tarball
    (layout.kernel_dir / "PARTS").write_text("# folder, patches\n1-first 1\n2-second 1\n")
    for d, old, new, name in (("1-first", "line 10\n", "line ten\n", "first"),
                              ("2-second", "line 20\n", "line twenty\n", "second")):
        (layout.patches / d).mkdir()
        p = _make_patch(tmp_path, tarball, old, new, name)
        (layout.patches / d / "0001-x.patch").write_bytes(p.read_bytes())
        (layout.patches / d / "0000-cover-letter.patch").write_text(f"cover of {name}\n")
    assert [p.parent.name for p in source.patch_files(layout)] == ["1-first", "2-second"]
    src = source.prepare(layout)
    assert _git(src, "log", "--format=%s").splitlines()[:2] == ["mm: second", "mm: first"]
    f = src / "mm" / "page_alloc.c"
    f.write_text(f.read_text().replace("line 30\n", "line thirty\n"))
    _git(src, "commit", "-qam", "mm: third")
    # the tree has three commits, PARTS counts two: export refuses
    with pytest.raises(HarnessError, match="PARTS counts 2 patches"):
        source.export(layout)
    (layout.kernel_dir / "PARTS").write_text("1-first 1\n2-second 2\n")
    new = source.export(layout)
    assert [str(p.relative_to(layout.patches)) for p in new] == [
        "1-first/0001-mm-first.patch", "2-second/0001-mm-second.patch",
        "2-second/0002-mm-third.patch"]
    assert (layout.patches / "2-second" / "0000-cover-letter.patch").read_text() == \
        "cover of second\n"
    assert "line thirty" in new[2].read_text()


def test_parts_file_errors_name_the_line(layout: Layout):
    (layout.kernel_dir / "PARTS").write_text("1-first 1\n1-first x\n")
    with pytest.raises(HarnessError, match=r"PARTS:2: expected"):
        source.patch_files(layout)
    (layout.kernel_dir / "PARTS").write_text("1-first 1\n")
    (layout.patches / "1-first").mkdir()
    with pytest.raises(HarnessError, match="has 0 patches, kernel/PARTS says 1"):
        source.patch_files(layout)
