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
