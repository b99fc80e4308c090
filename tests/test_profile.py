"""./xpfo profile: the symbolizer, the subtraction, the tables, the command
line and the plugin (compiled with gcc; loaded into QEMU without a guest).
One integration test profiles page_fault in off and strict (four boots)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import build, cli, console, guest, profile, qemu
from harness.errors import HarnessError
from harness.paths import Layout

# A System.map's shape: markers sharing addresses with functions, a
# __pfx_ padding symbol, data symbols, init text after _etext.
MAP = """\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81000000 T startup_64
ffffffff81000100 t __pfx_clear_page_erms
ffffffff81000110 T clear_page_erms
ffffffff81000200 T do_anonymous_page
ffffffff81000400 t __xpfo_zero_pcp
ffffffff81000600 T handle_mm_fault
ffffffff81000800 T _etext
ffffffff81000900 D some_data
ffffffff81100000 T _sinittext
ffffffff81100000 T start_kernel
ffffffff81100400 T _einittext
ffffffff81200000 b some_bss
"""
SYMS = profile.SymbolMap.parse(MAP.splitlines())
FN = {n: a for a, n in zip(SYMS.addrs, SYMS.names)}


def test_addresses_name_the_function_they_are_in():
    assert SYMS.name(0xffffffff81000110) == "clear_page_erms"
    assert SYMS.name(0xffffffff81000123) == "clear_page_erms"
    assert SYMS.name(0xffffffff810001ff) == "clear_page_erms"
    assert SYMS.name(0xffffffff81000200) == "do_anonymous_page"
    assert SYMS.name(0xffffffff810007ff) == "handle_mm_fault"
    assert SYMS.name(0xffffffff81100010) == "start_kernel"


def test_a_section_marker_never_names_a_function():
    assert SYMS.name(0xffffffff81000000) == "startup_64"
    assert SYMS.name(0xffffffff81000004) == "startup_64"
    assert "_stext" not in SYMS.names and "_sinittext" not in SYMS.names


def test_what_is_not_the_images_text_goes_to_a_bucket():
    assert SYMS.name(0x401000) == profile.USER
    assert SYMS.name(0x7ffff7fc1000) == profile.USER
    assert SYMS.name(0xffffffff81000800) == profile.OUTSIDE     # _etext: data after
    assert SYMS.name(0xffffffff81000900) == profile.OUTSIDE
    assert SYMS.name(0xffffffff81100400) == profile.OUTSIDE     # past init text
    assert SYMS.name(0xffffffffa0000000) == profile.OUTSIDE     # modules
    assert SYMS.name(0xffffffff80000000) == profile.OUTSIDE     # below the image
    assert SYMS.name(0xffff888000000000) == profile.OUTSIDE     # direct map


def test_the_offset_is_subtracted_before_the_lookup():
    off = 0x1d800000
    assert SYMS.name(0xffffffff81000210 + off, off) == "do_anonymous_page"
    assert SYMS.name(0xffffffff81000210 + off) == profile.OUTSIDE
    assert SYMS.name(0x401000, off) == profile.USER


def test_a_file_without_text_markers_is_not_a_system_map():
    with pytest.raises(HarnessError, match="not a kernel System.map"):
        profile.SymbolMap.parse(["ffffffff81000000 T foo", "garbage", ""])


def _counts(offset=0):
    """Blocks at each function's entry and inside it, as a boot gives them."""
    c = {}
    for i, name in enumerate(("clear_page_erms", "do_anonymous_page", "__xpfo_zero_pcp",
                              "handle_mm_fault", "startup_64", "start_kernel")):
        c[FN[name] + offset] = 1000 * (i + 1)
        c[FN[name] + 0x13 + offset] = 10 * (i + 1)
    c[0x401000] = 77
    return c


def test_locate_takes_the_maps_own_addresses_when_they_fit():
    assert profile.locate(_counts(), SYMS) == 0


def test_locate_finds_a_kaslr_offset():
    off = 0x1d800000
    counts = _counts(off)
    assert profile.locate(counts, SYMS) == off
    f = profile.by_function(counts, SYMS, off)
    assert f["clear_page_erms"] == 1010 and f["start_kernel"] == 6060
    assert f[profile.USER] == 77


def test_a_map_of_another_build_is_refused():
    # every hot block 0x40 past where the map puts an entry: a map of
    # another build (or a wrong offset) names the wrong functions
    counts = {a + 0x40: n for a, n in _counts().items() if a >= profile.USER_TOP}
    with pytest.raises(HarnessError, match="does not match the kernel that ran"):
        profile.locate(counts, SYMS, "fake.map")


def test_read_counts(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("ffffffff81000110 4100\n401000 5\nffffffff81000110 1\n")
    assert profile.read_counts(f) == {0xffffffff81000110: 4101, 0x401000: 5}
    f.write_text("ffffffff81000110\n")
    with pytest.raises(HarnessError, match="c.txt:1: not an 'ADDRESS COUNT' line"):
        profile.read_counts(f)
    with pytest.raises(HarnessError, match="wrote no counts"):
        profile.read_counts(tmp_path / "none.txt")


def _boot(size, units, timed, **functions):
    return profile.BootProfile(size, functions, units, timed)


def test_the_quick_boot_is_subtracted_and_the_rest_divided_by_the_extra_units():
    quick = _boot("quick", 8192, 56e6, boot_stuff=5_000_000, clear_page_erms=8192 * 4100,
                  gone=7)
    full = _boot("full", 65536, 448e6, boot_stuff=5_000_000, clear_page_erms=65536 * 4100,
                 handle_mm_fault=57344 * 30)
    p = profile.per_unit("off", quick, full)
    assert p.units == (8192, 65536)
    assert p.per_unit["clear_page_erms"] == 4100.0
    assert p.per_unit["handle_mm_fault"] == 30.0
    assert "boot_stuff" not in p.per_unit               # cancelled: not a row
    assert p.per_unit["gone"] == -7 / 57344
    assert p.total == pytest.approx(4130.0 - 7 / 57344)
    assert p.timed_per_unit == 448e6 / 65536


def test_no_extra_units_is_an_error():
    with pytest.raises(HarnessError, match="nothing to divide by"):
        profile.per_unit("off", _boot("quick", 100, 1.0), _boot("full", 100, 1.0))


OFF = profile.ModeProfile("off", {"clear_page_erms": 4100.0, "handle_mm_fault": 30.0,
                                  "free_unref_folios": 109.0, profile.USER: 8.0},
                          (8192, 65536), 4250.0)
STRICT = profile.ModeProfile("strict", {"clear_page_erms": 4100.0, "handle_mm_fault": 30.0,
                                        "free_unref_folios": 113.0, "__xpfo_zero_pcp": 98.4,
                                        "kernel_init_pages": -0.5, profile.USER: 8.0},
                             (8192, 65536), 4350.0)


def _rows(text):
    return [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]


def test_table_sorts_by_difference_and_its_columns_add_up():
    text = profile.table([OFF, STRICT], top=2)
    rows = _rows(text)
    assert rows[0] == "| function | xpfo=off | xpfo=strict (difference) |"
    assert rows[1] == "| `__xpfo_zero_pcp` | 0.0 | 98.4 (+98.4) |"
    assert rows[2] == "| `free_unref_folios` | 109.0 | 113.0 (+4.0) |"
    assert rows[3] == "| (4 other functions and buckets) | 4,138.0 | 4,137.5 (-0.5) |"
    assert rows[4] == "| **total** | 4,247.0 | 4,348.9 (+101.9) |"
    assert "the top 2 of 6" in text


def test_table_of_one_mode_lists_the_most_first():
    rows = _rows(profile.table([OFF], top=10))
    assert rows[0] == "| function | xpfo=off |"
    assert rows[1] == "| `clear_page_erms` | 4,100.0 |"
    assert rows[4] == f"| {profile.USER} | 8.0 |"
    assert rows[-1] == "| **total** | 4,247.0 |"


def test_a_difference_under_the_last_digit_is_not_negative():
    assert profile._cell(-0.04) == "0.0"
    assert profile._cell(5.0, 5.04) == "5.0 (+0.0)"
    rows = _rows(profile.totals_table([OFF, profile.ModeProfile(
        "strict", {**OFF.per_unit, profile.USER: 7.8}, (1, 2), 4250.0)]))
    assert rows[4] == "| ... in user space | 8 | 8 (+0) |"


def test_report_names_both_steps_and_what_else_a_step_runs():
    req = profile.ProfileRequest(["off", "strict"], "mmap", 1, None, Path("m"))
    text = profile.report(req, [OFF, STRICT], "./xpfo profile", {"date": "D", "qemu": "Q"})
    assert text.startswith("Command: `./xpfo profile`\n\n`mmap`, 1 vCPU, D, Q: ")
    assert "`sh:xbench:mmap:8` and `sh:xbench:mmap:64`" in text
    assert "also runs munmap" in text
    assert "| **total** |" in text and "| user pages, quick run / full run |" in text


def test_totals_table_gives_both_figures_per_unit():
    rows = _rows(profile.totals_table([OFF, STRICT]))
    assert rows[1] == "| user pages, quick run / full run | 8,192 / 65,536 | 8,192 / 65,536 |"
    assert rows[2] == ("| guest instructions per user page, full run minus quick run | 4,247 | "
                       "4,349 (+102, 1.024x) |")
    assert rows[3] == "| ... in the kernel image's text | 4,239 | 4,341 (+102, 1.024x) |"
    assert rows[4] == "| ... in user space | 8 | 8 (+0) |"
    assert rows[-1].startswith("| the workload's timed part per user page, full run")
    assert rows[-1].endswith("| 4,250 | 4,350 (+100, 1.024x) |")


def test_workloads_are_those_with_two_sizes():
    assert "page_fault" in profile.WORKLOADS and "fork" in profile.WORKLOADS
    for name in ("exec", "lseek", "build_sys", "pread1"):
        assert name not in profile.WORKLOADS
    assert "vanilla" not in profile.MODES and "strict+pgt-batched" in profile.MODES


@pytest.mark.parametrize("argv", [["profile", "--modes", "off", "bogus"],
                                  ["profile", "--modes", "vanilla"],
                                  ["profile", "--workload", "exec"],
                                  ["profile", "--top", "0"]])
def test_bad_arguments_are_refused(argv, capsys, monkeypatch):
    monkeypatch.setattr(build, "ensure_kernel", lambda *a, **kw: pytest.fail("built"))
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_a_kernel_without_a_system_map_is_one_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(build, "ensure_kernel", lambda *a, **kw: pytest.fail("built"))
    monkeypatch.setattr(build, "given_image", lambda *a, **kw: pytest.fail("initramfs"))
    image = tmp_path / "bzImage"
    image.write_bytes(b"")
    assert cli.main(["profile", "--kernel", str(image)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: no System.map beside {image}")
    assert err.count("error:") == 1 and "--system-map" in err
    assert cli.main(["profile", "--kernel", str(image), "--system-map",
                     str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.startswith("error: no such System.map")


def test_system_map_is_found_beside_the_image_or_at_its_trees_top(tmp_path):
    tree = tmp_path / "obj"
    boot = tree / "arch" / "x86" / "boot"
    boot.mkdir(parents=True)
    (boot / "bzImage").write_bytes(b"")
    (tree / "System.map").write_text(MAP)
    assert profile.system_map(str(boot / "bzImage"), None) == tree / "System.map"
    (boot / "System.map").write_text(MAP)
    assert profile.system_map(str(boot / "bzImage"), None) == boot / "System.map"
    layout = Layout(root=tmp_path)
    assert profile.system_map(None, None, layout) == layout.obj / "System.map"


def test_command_line():
    req = profile.ProfileRequest(["off", "strict"], "page_fault", 1, None, Path("m"))
    assert (profile.command_line(req, "K")
            == "./xpfo profile --modes off strict --workload page_fault --cpus 1 --kernel K")


def test_the_plugin_reaches_qemu_as_one_argument(tmp_path):
    arg = qemu.plugin_arg(Path("/p/insnprof.so"), out="/a,b/c.txt")
    assert arg == "/p/insnprof.so,out=/a,,b/c.txt"
    m = qemu.Machine(kernel=Path("k"), initrd=Path("i"), plugins=[arg], icount=True)
    args = m.qemu_args()
    assert args[args.index("-plugin") + 1] == arg
    req = guest.GuestRequest(steps=["info"], plugins=[arg], machine="bochs-tgl")
    with pytest.raises(HarnessError, match="takes no TCG plugins"):
        guest.machine(req, Layout(root=tmp_path))


def test_profiled_boots_are_benchs_cell_with_the_plugin_and_nokaslr(tmp_path, monkeypatch):
    seen = []

    def fake_boot(greq, cell):
        seen.append(greq)
        raise HarnessError("stop here")

    monkeypatch.setattr(profile.bench, "boot", fake_boot)
    req = profile.ProfileRequest(["strict"], "page_fault", 1, Path("/k/bzImage"), Path("m"))
    with pytest.raises(HarnessError, match="stop here"):
        profile._boot(req, Path("/p/insnprof.so"), SYMS, "strict", "quick", tmp_path)
    g = seen[0]
    assert "xpfo=strict" in g.params and "nokaslr" in g.params
    assert g.icount and g.kernel == Path("/k/bzImage")
    assert "sh:xbench:page_fault:8:1" in g.steps
    assert g.plugins == [f"/p/insnprof.so,out={tmp_path / 'strict-quick.txt'}"]


def test_a_crashed_guest_is_one_clear_error(tmp_path, monkeypatch):
    run = qemu.Run(qemu.Machine(kernel=Path("k"), initrd=Path("i")), qemu.Outcome.CRASHED,
                   1.0, console.parse(["Linux version 6.12", "Kernel panic - not syncing: x"]),
                   tmp_path / "guest.log", 0, "guest stopped before its runner finished")
    monkeypatch.setattr(profile.bench, "boot", lambda greq, cell: (run, None))
    req = profile.ProfileRequest(["strict"], "page_fault", 1, None, Path("m"))
    with pytest.raises(HarnessError, match="profile-strict-full-1cpu: ") as e:
        profile._boot(req, Path("p.so"), SYMS, "strict", "full", tmp_path)
    assert "runner finished" in e.value.what and str(tmp_path / "guest.log") in e.value.hint


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")


@needs_gcc
def test_plugin_compiles_once_and_exports_its_entry_points(tmp_path):
    layout = Layout(root=tmp_path)
    so = profile.build_plugin(layout)
    assert so == tmp_path / "out" / "plugin" / "insnprof.so" and so.is_file()
    assert list(so.parent.iterdir()) == [so]
    if shutil.which("nm"):
        syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                              text=True, check=True).stdout.split()
        assert "qemu_plugin_install" in syms and "qemu_plugin_version" in syms
    mtime = so.stat().st_mtime_ns
    assert profile.build_plugin(layout) == so and so.stat().st_mtime_ns == mtime


@needs_gcc
def test_a_plugin_that_does_not_compile_leaves_nothing(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("int qemu_plugin_install(void) { return nope; }\n")
    layout = Layout(root=tmp_path)
    with pytest.raises(HarnessError, match="does not compile"):
        profile.build_plugin(layout, src=bad)
    assert list(profile.plugin_path(layout).parent.iterdir()) == []


def test_a_missing_compiler_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(profile, "CC", "no-such-cc")
    with pytest.raises(HarnessError, match="no-such-cc not found") as e:
        profile.build_plugin(Layout(root=tmp_path))
    assert "./xpfo setup" in e.value.hint


needs_qemu = pytest.mark.skipif(shutil.which(qemu.QEMU) is None or shutil.which("gcc") is None,
                                reason="QEMU or gcc not installed")


@needs_qemu
def test_qemu_loads_the_plugin(tmp_path):
    profile.check_plugin(profile.build_plugin(Layout(root=tmp_path)))


@needs_qemu
def test_a_plugin_qemu_refuses_is_one_clear_error(tmp_path):
    src = tmp_path / "empty.c"
    src.write_text("int not_a_plugin;\n")
    so = tmp_path / "empty.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    with pytest.raises(HarnessError, match="refused the profiling plugin") as e:
        profile.check_plugin(so)
    assert "plugin support" in e.value.hint


@pytest.mark.integration
@pytest.mark.boots("profile", modes=("off", "strict"), cpus=1)
def test_profile_page_fault_end_to_end(tmp_path):
    build.ensure_kernel()
    req = profile.ProfileRequest(["off", "strict"], "page_fault", 1, None,
                                 profile.system_map(None, None), top=10)
    off, strict = profile.run_and_report(req, tmp_path / "p", "from the test suite")
    for p in (off, strict):
        # every instruction of the extra size against the workload's own clock
        assert p.total == pytest.approx(p.timed_per_unit, rel=0.05)
        # a 4K page cleared by rep stosb: 4,096 iterations, each one counted
        assert p.per_unit["clear_page_erms"] == pytest.approx(4100, rel=0.02)
    assert strict.per_unit.get("__xpfo_alloc_pages", 0) > 0
    assert "__xpfo_alloc_pages" not in off.per_unit
    text = (tmp_path / "p" / "profile.md").read_text()
    assert "| **total** |" in text
    assert sorted(os.listdir(tmp_path / "p" / "raw")) == [
        "off-full.txt", "off-quick.txt", "strict-full.txt", "strict-quick.txt"]
