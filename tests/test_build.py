"""A build is reused only when nothing it is made of changed."""

import subprocess
from pathlib import Path

import pytest

from harness import build

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


@pytest.fixture
def req(tmp_path: Path) -> build.BuildRequest:
    src, obj = tmp_path / "src", tmp_path / "obj"
    (src / "mm").mkdir(parents=True)
    (src / "mm" / "xpfo.c").write_text("int x;\n")
    (src / ".gitignore").write_text("*.o\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*GIT, *args], cwd=src, check=True)
    (obj / "arch/x86/boot").mkdir(parents=True)
    (obj / "arch/x86/boot/bzImage").write_bytes(b"k")
    frag = tmp_path / "xpfo.fragment"
    frag.write_text("CONFIG_XPFO=y\n")
    r = build.BuildRequest(src=src, obj=obj, fragment=frag, jobs=1)
    (obj / ".xpfo-build-ok").write_text(build.config_id(r) + "\n")  # as build() does
    return r


def test_unchanged_tree_is_current(req):
    assert build.is_current(req)


def test_uncommitted_edit_makes_the_build_stale(req):
    f = req.src / "mm" / "xpfo.c"
    f.write_text("int x = 1;\n")
    assert not build.is_current(req)
    f.write_text("int x;\n")   # undone: the same tree as built
    assert build.is_current(req)
    subprocess.run(["git", "add", "mm/xpfo.c"], cwd=req.src, check=True)
    f.write_text("int y;\n")
    subprocess.run(["git", "add", "mm/xpfo.c"], cwd=req.src, check=True)  # staged only
    assert not build.is_current(req)


def test_new_file_makes_the_build_stale_but_ignored_output_does_not(req):
    (req.src / "mm" / "xpfo.o").write_bytes(b"obj")
    assert build.is_current(req)
    new = req.src / "mm" / "new.c"
    new.write_text("int z;\n")
    assert not build.is_current(req)
    stamp = build.config_id(req)
    new.write_text("int zz;\n")
    assert build.config_id(req) != stamp


def test_commit_and_fragment_change_make_the_build_stale(req):
    subprocess.run([*GIT, "commit", "-q", "--allow-empty", "-m", "x"], cwd=req.src, check=True)
    assert not build.is_current(req)
    (req.obj / ".xpfo-build-ok").write_text(build.config_id(req) + "\n")
    assert build.is_current(req)
    req.fragment.write_text("CONFIG_XPFO=n\n")
    assert not build.is_current(req)
