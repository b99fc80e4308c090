import stat
import subprocess

from harness import initramfs


def test_newc_archive_lists_with_cpio(tmp_path):
    out = tmp_path / "a.cpio"
    with open(out, "wb") as f:
        w = initramfs.Newc(f)
        w.add(initramfs.Entry("bin", stat.S_IFDIR | 0o755))
        w.add(initramfs.Entry("bin/hello", stat.S_IFREG | 0o755, b"#!/bin/sh\necho hi\n"))
        w.add(initramfs.Entry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1)))
        w.add(initramfs.Entry("bin/sh", stat.S_IFLNK | 0o777, b"busybox"))
        w.close()
    listing = subprocess.run(["cpio", "-itv"], stdin=open(out, "rb"), capture_output=True,
                             text=True, check=True).stdout
    assert "bin/hello" in listing
    assert "dev/console" in listing and listing.count("\nc") + listing.startswith("c") >= 1
    assert "bin/sh -> busybox" in listing
    assert out.stat().st_size % 4 == 0


def test_two_builds_at_once_do_not_move_each_others_file(tmp_path, monkeypatch):
    """Two harness runs that build the initramfs at the same time (two
    benches started together) each finish with a whole archive: the second
    one's rename does not take the first one's half-written file away."""
    from harness.paths import Layout

    layout = Layout(root=tmp_path)
    (layout.guest_src / "src").mkdir(parents=True)
    (layout.guest_src / "steps").mkdir()
    (layout.guest_src / "init").write_text("#!/bin/sh\n")
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"\x7fELF")
    monkeypatch.setattr(initramfs, "BUSYBOX", busybox)

    pid = [1001]
    monkeypatch.setattr(initramfs, "_pid", lambda: pid[0])
    close = initramfs.Newc.close
    nested = []

    def close_then_other_build(self):
        close(self)
        if pid[0] == 1001 and not nested:
            # another process builds and renames while this one is writing
            pid[0] = 1002
            nested.append(initramfs.build(layout))
            pid[0] = 1001

    monkeypatch.setattr(initramfs.Newc, "close", close_then_other_build)
    target = initramfs.build(layout)
    assert nested == [target]
    listing = subprocess.run(["cpio", "-it"], stdin=open(target, "rb"), capture_output=True,
                             text=True, check=True).stdout
    assert "init" in listing.split()
    assert sorted(p.name for p in layout.guest_build.iterdir()) == ["bin", "initramfs.cpio"]
