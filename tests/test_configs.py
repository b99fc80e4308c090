"""The shipped-configuration builds: selection, table, and SERIES.md sections."""

import pytest

from conftest import ROOT
from harness import configs, series, source
from harness.errors import HarnessError
from harness.paths import Layout


def test_configs_cover_maxsmp_and_modules():
    names = {c.name: c for c in configs.CONFIGS}
    assert "CONFIG_MAXSMP=y" in names["maxsmp"].options
    # the whole series, pgtprot included, at NR_CPUS=8192 and as modules
    assert "CONFIG_PGTPROT=y" in names["maxsmp"].options
    assert "CONFIG_PGTPROT=y" in names["modules"].options
    mods = names["modules"]
    assert {"CONFIG_MODULES=y", "CONFIG_LKDTM=m", "CONFIG_TEST_XPFO_RET2DIR=m"} <= set(mods.options)
    assert "modules" in mods.targets
    # and with the series configured out
    assert {"CONFIG_XPFO", "CONFIG_PGTPROT"} == {
        o.split()[1] for o in names["off"].options if o.endswith("is not set")}
    assert [c.name for c in configs.by_name(None)] == [c.name for c in configs.CONFIGS]
    assert [c.name for c in configs.by_name(["modules"])] == ["modules"]


def test_table_says_which_configuration_fails_and_why():
    rs = [configs.ConfigResult("maxsmp", "m", False, 61.0, "abc123",
                               "head64.c: error: BUILD_BUG_ON failed\nmore"),
          configs.ConfigResult("modules", "x", True, 600.0, "abc123")]
    t = configs.table(rs)
    assert "| maxsmp | m | abc123 | FAILS: head64.c: error: BUILD_BUG_ON failed |" in t
    assert "| modules | x | abc123 | builds |" in t


def test_unknown_configuration_is_one_error():
    with pytest.raises(HarnessError, match="unknown configuration 'bogus'"):
        configs.run(["bogus"])


def test_series_doc_keeps_the_shipped_section(tmp_path):
    doc = tmp_path / "SERIES.md"
    assert series.split_doc(doc) == ("", "")
    doc.write_text("# Series check\n\n| p |\n\n## Shipped configurations\n\n| c |\n")
    head, shipped = series.split_doc(doc)
    assert head == "# Series check\n\n| p |\n\n"
    assert shipped.strip().startswith("## Shipped configurations") and "| c |" in shipped


def _series_c_files() -> set:
    files = set()
    for patch in source.patch_files(Layout(root=ROOT)):
        for line in patch.read_text(errors="replace").splitlines():
            if line.startswith("+++ b/") and line.endswith(".c"):
                files.add(line[len("+++ b/"):])
    return files


def test_touched_config_compiles_what_the_test_kernel_does_not():
    touched = {c.name: c for c in configs.CONFIGS}["touched"]
    objs = {t[:-2] + ".c" for t in touched.targets}
    changed = _series_c_files()
    # every object it compiles is one the series changes (no stale target),
    # or a user of a header it changes (skbuff.h, f2fs.h)
    header_users = {"net/core/skbuff.c", "fs/f2fs/super.c"}
    assert objs - header_users <= changed, objs - changed
    # and every file the series changes outside the test kernel is compiled
    outside = {f for f in changed if f.startswith(("drivers/usb", "drivers/gpu", "drivers/xen",
                                                   "drivers/infiniband", "fs/erofs",
                                                   "fs/bcachefs", "fs/ubifs", "net/sunrpc",
                                                   "crypto/", "kernel/kexec", "fs/btrfs",
                                                   "drivers/md", "drivers/mtd",
                                                   "drivers/scsi"))}
    assert outside <= objs, outside - objs
