"""The per-patch check: what it builds in each configuration, and its table."""

from pathlib import Path

import pytest

from harness import series
from harness.errors import HarnessError
from harness.paths import Layout


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    root = tmp_path / "repo"
    (root / "kernel" / "config").mkdir(parents=True)
    (root / "kernel" / "config" / "xpfo.fragment").write_text(
        "CONFIG_LKDTM=y\nCONFIG_XPFO=y\nCONFIG_XPFO_KUNIT_TEST=y\nCONFIG_PGTPROT=y\n")
    lay = Layout(root=root)
    for o in ("mm/xpfo.o", "fs/buffer.o", "drivers/misc/lkdtm/xpfo.o", "mm/memory.o"):
        (lay.obj / o).parent.mkdir(parents=True, exist_ok=True)
        (lay.obj / o).write_text("")
    return lay


def test_off_fragment_turns_both_features_off(layout: Layout):
    text = series.config_fragment(layout, "off").read_text()
    assert "CONFIG_LKDTM=y" in text
    assert "CONFIG_XPFO=y" not in text and "CONFIG_XPFO_KUNIT_TEST" not in text
    assert "# CONFIG_XPFO is not set" in text and "# CONFIG_PGTPROT is not set" in text
    assert series.config_fragment(layout, "on") == layout.fragment


def test_objects_are_the_hooks_and_what_the_test_kernel_builds(layout: Layout):
    files = ["mm/xpfo.c", "fs/buffer.c", "fs/affs/file.c", "drivers/misc/lkdtm/xpfo.c",
             "include/linux/xpfo.h", "tools/testing/x.c", "mm/memory.c"]
    on = series.objects_for(layout, "on", files)
    off = series.objects_for(layout, "off", files)
    assert on[:len(series.HOOK_OBJECTS)] == list(series.HOOK_OBJECTS)
    assert on.count("mm/memory.o") == 1
    # fs/affs is not in the test kernel; headers and tools are not objects
    assert set(on) - set(series.HOOK_OBJECTS) == {
        "mm/xpfo.o", "fs/buffer.o", "drivers/misc/lkdtm/xpfo.o"}
    # only a kernel with XPFO builds mm/xpfo.o; lkdtm's xpfo.o is always built
    assert "mm/xpfo.o" not in off and "drivers/misc/lkdtm/xpfo.o" in off


def test_unknown_configuration_and_missing_full_build(layout: Layout):
    with pytest.raises(HarnessError, match="unknown configuration 'maybe'"):
        series.check(layout, configs=("maybe",))
    (layout.obj / "vmlinux.o").unlink(missing_ok=True)
    with pytest.raises(HarnessError, match="--objects takes the list"):
        series.check(layout, objects=True)


def test_table_has_a_column_per_configuration():
    r = series.PatchCheck("1-xpfo/0001-a.patch", "abc", True, False, 61.0, 0, 1, 0,
                          ["x.patch:1: WARNING:FOO: bar"], {"on": True, "off": False})
    text = series.table([r])
    assert "| patch | XPFO, pgtprot on | XPFO, pgtprot off | build time |" in text
    assert "| 1-xpfo/0001-a.patch | yes | NO | 1m01s | 0 errors, 1 warnings, 0 checks |" in text
    assert "- 1-xpfo/0001-a.patch: WARNING:FOO: bar" in text


def _tree(tmp_path: Path, kconfig: str, arch: str) -> Path:
    (tmp_path / "mm").mkdir(parents=True)
    (tmp_path / "arch/x86").mkdir(parents=True)
    (tmp_path / "mm/Kconfig").write_text(kconfig)
    (tmp_path / "arch/x86/Kconfig").write_text(arch)
    return tmp_path


ARCH = "config X86_64\n\tdef_bool y\n\nconfig X86\n\tdef_bool y\n\tselect ARCH_A\n\tselect ARCH_B\n"


def test_feature_not_selectable_yet_is_forced_for_the_on_build(tmp_path: Path):
    wt = _tree(tmp_path, "config XPFO\n\tbool \"x\"\n", ARCH)
    assert series.force_selectable(wt) == ["XPFO"]
    text = (wt / "arch/x86/Kconfig").read_text()
    assert ("config X86\n\tdef_bool y\n\tselect ARCH_SUPPORTS_XPFO\t\tif X86_64\n"
            "\tselect ARCH_A") in text
    # once is enough: a second call finds the select and adds nothing
    assert series.force_selectable(wt) == []
    assert text == (wt / "arch/x86/Kconfig").read_text()


def test_nothing_forced_before_the_feature_or_once_x86_selects_it(tmp_path: Path):
    before = _tree(tmp_path / "a", "config OTHER\n", ARCH)
    assert series.force_selectable(before) == []
    assert (before / "arch/x86/Kconfig").read_text() == ARCH
    selects = ARCH + "\tselect ARCH_SUPPORTS_XPFO\t\tif X86_64\n"
    after = _tree(tmp_path / "b", "config XPFO\n", selects)
    assert series.force_selectable(after) == []
    assert (after / "arch/x86/Kconfig").read_text() == selects


def test_forced_build_is_marked_in_the_table():
    r = series.PatchCheck("1-xpfo/0003-a.patch", "abc", True, True, 5.0, 0, 0, 0, [],
                          {"on": True, "off": True}, ["XPFO"])
    text = series.table([r])
    assert "| 1-xpfo/0003-a.patch | yes (XPFO forced) | yes |" in text
    assert "does not let the feature be selected yet" in text


def test_boot_modes_follow_the_kernel_configuration():
    assert series.boot_modes("CONFIG_XPFO=y\nCONFIG_PGTPROT=y\n", []) == [
        "strict", "strict+pgt-batched"]
    assert series.boot_modes("CONFIG_XPFO=y\n# CONFIG_PGTPROT is not set\n", []) == ["strict"]
    # XPFO only there because the check forced its select: nothing to boot
    assert series.boot_modes("CONFIG_XPFO=y\n", ["XPFO"]) == []
    assert series.boot_modes("# CONFIG_XPFO is not set\nCONFIG_XPFO_DEBUG=y\n", []) == []


def _booted(passed: bool) -> series.PatchCheck:
    boots = {"strict": {"passed": True, "failed": [], "seconds": 60.0, "log": "a"}}
    if not passed:
        boots["strict+pgt-batched"] = {"passed": False, "seconds": 70.0, "log": "b",
                                       "failed": ["PGTPROT_WRITE_IMAGE: no result"]}
    return series.PatchCheck("2-pgtprot/0002-a.patch", "abc", True, True, 5.0, 0, 0, 0, [],
                             {"on": True}, [], boots)


def test_boot_table_shows_each_mode_and_what_failed():
    text = series.boot_table([_booted(True), _booted(False)])
    assert "| 2-pgtprot/0002-a.patch | passed | - | 1m00s |" in text
    assert "| 2-pgtprot/0002-a.patch | passed | FAILED (1) | 2m10s |" in text
    assert "- 2-pgtprot/0002-a.patch, strict+pgt-batched: PGTPROT_WRITE_IMAGE: no result" in text


def _at(patch: str, passed: bool) -> series.PatchCheck:
    r = _booted(passed)
    return series.PatchCheck(patch, r.commit, True, True, 5.0, 0, 0, 0, [], r.by_config, [],
                             r.boots)


def test_doc_sections_survive_each_other(layout: Layout, monkeypatch):
    monkeypatch.setattr(series, "repo_head", lambda layout: "abc")
    doc = series.doc_path(layout)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text("# Series check\n\nold table\n\n## The two series\n\nby hand\n\n"
                   f"{series.SHIPPED_HEADING}\n\nshipped\n")
    series.write_boot_doc([_at("1-xpfo/0026-a.patch", True)], 26, 26, 600.0, layout)
    series.write_doc("new table", True, layout)
    # a second run: another patch joins, a patch booted again replaces its row
    series.write_boot_doc([_at("2-pgtprot/0002-b.patch", False),
                           _at("1-xpfo/0026-a.patch", False)], 26, 31, 600.0, layout)
    text = doc.read_text()
    assert "old table" not in text and "new table" in text and "by hand" in text
    assert text.index("by hand") < text.index(series.BOOT_HEADING) < text.index(
        series.SHIPPED_HEADING)
    assert text.count(series.BOOT_HEADING) == 1 and "shipped" in text
    assert "--from 26 --to 26 --write" in text and "--from 26 --to 31 --write" in text
    assert "| 1-xpfo/0026-a.patch | passed | FAILED (1) |" in text
    assert "| 1-xpfo/0026-a.patch | passed | - |" not in text
    assert "| 2-pgtprot/0002-b.patch | passed | FAILED (1) |" in text
    assert text.count("- 1-xpfo/0026-a.patch, strict+pgt-batched: PGTPROT_WRITE_IMAGE") == 1
    # a third write of the same keeps one of everything
    series.write_boot_doc([_at("1-xpfo/0026-a.patch", False)], 26, 26, 600.0, layout)
    again = doc.read_text()
    assert again.count("| 2-pgtprot/0002-b.patch |") == 1
    assert again.count("| 1-xpfo/0026-a.patch |") == 1


def test_boot_needs_the_on_configuration(layout: Layout):
    with pytest.raises(HarnessError, match="--boot boots the on configuration"):
        series.check(layout, configs=("off",), boot=True)


def test_pgtprot_tests_are_told_apart():
    assert series.pgtprot_test("PGTPROT_WRITE_PTE (strict): no result")
    assert series.pgtprot_test("PGTPROT_AUDIT[boot] (strict): no audit")
    assert series.pgtprot_test("IMAGE_TAIL (strict): 495 pages mapped")
    assert not series.pgtprot_test("XPFO_READ_USER (strict): read the value")
    assert not series.pgtprot_test("KUnit xpfo suite, xpfo=strict: x failed")


def test_pgtprot_is_forced_too_until_x86_selects_it(tmp_path: Path):
    both = "config XPFO\n\tbool\n\nconfig PGTPROT\n\tbool\n"
    arch = ARCH + "\tselect ARCH_SUPPORTS_XPFO\t\tif X86_64\n"
    wt = _tree(tmp_path, both, arch)
    assert series.force_selectable(wt) == ["PGTPROT"]
    assert "select ARCH_SUPPORTS_PGTPROT" in (wt / "arch/x86/Kconfig").read_text()
    # a kernel whose pgtprot was forced boots in strict alone
    assert series.boot_modes("CONFIG_XPFO=y\nCONFIG_PGTPROT=y\n", ["PGTPROT"]) == ["strict"]


def test_one_series_check_at_a_time(layout: Layout):
    with series.worktree_lock(layout):
        with pytest.raises(HarnessError, match="another ./xpfo series-check"):
            with series.worktree_lock(layout):
                pass
    # released: the next one gets it
    with series.worktree_lock(layout):
        pass
