"""Builds of the series in the configurations people ship.

The test kernel is trimmed for a 2-core machine; distributions build with
NR_CPUS=8192 (MAXSMP) and with modules. Each configuration here is the
defconfig plus a few options, built from scratch in a directory of its own
(build/cfg-NAME) with ccache: the result says whether the series builds
there, not how it runs.
"""

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from . import build, deps, printer, series, source
from .errors import HarnessError
from .paths import LAYOUT, Layout


@dataclass(frozen=True)
class ShippedConfig:
    name: str
    what: str
    options: Sequence[str]      # fragment lines over x86_64_defconfig + kvm_guest.config
    targets: Sequence[str]


CONFIGS = (
    # what a distribution that does not want the feature builds: every hook
    # the series adds must compile to nothing
    ShippedConfig("off", "defconfig with XPFO, and so pgtprot, not set",
                  ("# CONFIG_XPFO is not set", "# CONFIG_PGTPROT is not set"), ("bzImage",)),
    ShippedConfig("maxsmp", "defconfig + MAXSMP (NR_CPUS=8192), XPFO and pgtprot built in",
                  ("CONFIG_XPFO=y", "CONFIG_PGTPROT=y", "CONFIG_MAXSMP=y"), ("bzImage",)),
    # lkdtm as a module: modpost checks that what its tests call is exported
    ShippedConfig("modules", "defconfig + modules, pgtprot, LKDTM=m and the ret2dir demo =m",
                  ("CONFIG_XPFO=y", "CONFIG_PGTPROT=y", "CONFIG_MODULES=y",
                   "CONFIG_DEBUG_KERNEL=y",
                   "CONFIG_DEBUG_FS=y", "CONFIG_LKDTM=m", "CONFIG_TEST_XPFO_RET2DIR=m",
                   "CONFIG_HIBERNATION=y", "CONFIG_MEMORY_FAILURE=y", "CONFIG_SECRETMEM=y"),
                  ("bzImage", "modules")),
    # The series changes code the test kernel does not build (filesystems,
    # drivers): compile exactly those objects in a configuration that has them.
    ShippedConfig("touched", "defconfig + the filesystems and drivers the series changes, "
                  "their objects only",
                  ("CONFIG_XPFO=y", "CONFIG_EROFS_FS=y", "CONFIG_EROFS_FS_ZIP=y",
                   "CONFIG_BCACHEFS_FS=y", "CONFIG_MTD=y", "CONFIG_MTD_UBI=y",
                   "CONFIG_UBIFS_FS=y", "CONFIG_NFS_FS=y", "CONFIG_CRYPTO_LZO=y",
                   "CONFIG_KEXEC=y", "CONFIG_USB_MON=y", "CONFIG_DRM_I915=y",
                   "CONFIG_DRM_VMWGFX=y", "CONFIG_XEN=y", "CONFIG_XEN_BALLOON=y",
                   "CONFIG_XEN_GNTDEV=y", "CONFIG_INFINIBAND=y",
                   "CONFIG_INFINIBAND_RDMAVT=y", "CONFIG_MEMORY_HOTPLUG=y",
                   "CONFIG_MEMORY_HOTREMOVE=y", "CONFIG_MIGRATION=y",
                   "CONFIG_BTRFS_FS=y", "CONFIG_BLK_DEV_ZONED=y", "CONFIG_F2FS_FS=y",
                   "CONFIG_MD=y", "CONFIG_BCACHE=y", "CONFIG_MTD_BLOCK2MTD=y",
                   # filesystems whose symlinks leave the direct map (the symlink patches)
                   "CONFIG_AF_RXRPC=y", "CONFIG_AFS_FS=y", "CONFIG_CRAMFS=y",
                   "CONFIG_VXFS_FS=y", "CONFIG_HFSPLUS_FS=y", "CONFIG_JFS_FS=y",
                   "CONFIG_MINIX_FS=y", "CONFIG_NILFS2_FS=y", "CONFIG_NTFS3_FS=y",
                   "CONFIG_CONFIGFS_FS=y", "CONFIG_OCFS2_FS=y", "CONFIG_QNX4FS_FS=y",
                   "CONFIG_QNX6FS_FS=y",
                   "CONFIG_REISERFS_FS=y", "CONFIG_ROMFS_FS=y", "CONFIG_SQUASHFS=y",
                   "CONFIG_SYSV_FS=y", "CONFIG_UFS_FS=y", "CONFIG_AFFS_FS=y",
                   "CONFIG_BEFS_FS=y", "CONFIG_CODA_FS=y", "CONFIG_EFS_FS=y",
                   "CONFIG_HPFS_FS=y", "CONFIG_ISO9660_FS=y", "CONFIG_UDF_FS=y",
                   "CONFIG_FUSE_FS=y", "CONFIG_HUGETLBFS=y"),
                  ("fs/erofs/decompressor.o", "fs/bcachefs/compress.o", "fs/ubifs/file.o",
                   "net/sunrpc/xdr.o", "crypto/scompress.o", "kernel/kexec_core.o",
                   "drivers/usb/core/message.o", "drivers/usb/mon/mon_text.o",
                   "drivers/usb/mon/mon_bin.o", "drivers/gpu/drm/i915/gem/i915_gem_pages.o",
                   "drivers/gpu/drm/ttm/ttm_pool.o", "drivers/infiniband/sw/rdmavt/mr.o",
                   "drivers/xen/balloon.o", "mm/migrate.o",
                   "mm/memory_hotplug.o", "mm/xpfo.o", "net/core/skbuff.o", "fs/buffer.o",
                   # readers of the block-device page cache (its conversion patch)
                   "block/bdev.o", "block/partitions/core.o", "drivers/scsi/scsicam.o",
                   "fs/btrfs/volumes.o", "fs/btrfs/zoned.o", "fs/btrfs/disk-io.o",
                   "fs/f2fs/super.o", "drivers/md/bcache/super.o",
                   "drivers/mtd/devices/block2mtd.o",
                   # inode_nohighmem() dropped, pages reached through kmap (the fs patches)
                   "fs/afs/inode.o", "fs/bcachefs/fs.o", "fs/bcachefs/checksum.o",
                   "fs/btrfs/inode.o", "fs/cramfs/inode.o", "fs/erofs/inode.o",
                   "fs/freevxfs/vxfs_inode.o", "fs/freevxfs/vxfs_lookup.o",
                   "fs/freevxfs/vxfs_subr.o", "fs/hfsplus/inode.o", "fs/hugetlbfs/inode.o",
                   "fs/jfs/inode.o", "fs/jfs/namei.o", "fs/minix/inode.o",
                   "fs/nilfs2/inode.o", "fs/nilfs2/namei.o", "fs/ntfs3/inode.o",
                   "fs/ocfs2/inode.o", "fs/ocfs2/namei.o", "fs/qnx4/inode.o",
                   "fs/qnx6/inode.o", "fs/reiserfs/inode.o", "fs/reiserfs/namei.o",
                   "fs/romfs/super.o", "fs/squashfs/inode.o", "fs/sysv/inode.o",
                   "fs/ufs/inode.o", "fs/ufs/namei.o", "fs/affs/inode.o", "fs/affs/namei.o",
                   "fs/affs/symlink.o", "fs/affs/file.o", "fs/befs/linuxvfs.o",
                   "fs/coda/cnode.o", "fs/coda/symlink.o", "fs/efs/inode.o",
                   "fs/efs/symlink.o", "fs/hpfs/inode.o", "fs/hpfs/namei.o",
                   "fs/isofs/inode.o", "fs/isofs/rock.o", "fs/udf/inode.o", "fs/udf/namei.o",
                   "fs/udf/symlink.o", "fs/fuse/dir.o", "fs/f2fs/inode.o",
                   "fs/f2fs/namei.o")),
)


@dataclass(frozen=True)
class ConfigResult:
    name: str
    what: str
    ok: bool
    elapsed: float
    series_commit: str
    message: str = ""


def by_name(names: Optional[Sequence[str]]) -> List[ShippedConfig]:
    if not names:
        return list(CONFIGS)
    known = {c.name: c for c in CONFIGS}
    return [known[n] for n in names]


def _head(src: Path) -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=src,
                       capture_output=True, text=True, check=False)
    return r.stdout.strip() or "unknown"


def build_one(cfg: ShippedConfig, layout: Layout = LAYOUT,
              jobs: Optional[int] = None) -> ConfigResult:
    obj = layout.build / f"cfg-{cfg.name}"
    obj.mkdir(parents=True, exist_ok=True)
    frag = obj.parent / f"cfg-{cfg.name}.fragment"
    frag.write_text("".join(f"{o}\n" for o in cfg.options))
    base = build.request(layout, jobs=jobs)
    req = build.BuildRequest(src=layout.src, obj=obj, fragment=frag, jobs=base.jobs)
    start = time.monotonic()
    (obj / ".xpfo-config-ok").unlink(missing_ok=True)
    r = build.configure(req)
    if r.status is not build.Status.SUCCESS:
        return ConfigResult(cfg.name, cfg.what, False, time.monotonic() - start,
                            _head(layout.src), f"config: {r.message}")
    cmd = build._make(req, *cfg.targets)
    printer.command(cmd)
    log = obj / "build.log"
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=req.src, env=build._env(req), stdout=f,
                            stderr=subprocess.STDOUT).returncode
    elapsed = time.monotonic() - start
    if rc != 0:
        lines = log.read_text(errors="replace").splitlines()
        errs = [line for line in lines if "error" in line.lower() or "ERROR" in line]
        return ConfigResult(cfg.name, cfg.what, False, elapsed, _head(layout.src),
                            "\n".join((errs or lines)[-8:]) + f"\n(full log {log})")
    (obj / ".xpfo-config-ok").write_text(_head(layout.src) + "\n")
    return ConfigResult(cfg.name, cfg.what, True, elapsed, _head(layout.src))


def table(results: Sequence[ConfigResult]) -> str:
    rows = ["| configuration | what | series HEAD | result | time |", "|---|---|---|---|---|"]
    for r in results:
        first = r.message.splitlines()[0] if r.message else ""
        rows.append(f"| {r.name} | {r.what} | {r.series_commit} | "
                    f"{'builds' if r.ok else 'FAILS: ' + first} | "
                    f"{printer.fmt_elapsed(r.elapsed)} |")
    return "\n".join(rows)


def run(names: Sequence[str], layout: Layout = LAYOUT, jobs: Optional[int] = None,
        write: bool = False) -> bool:
    """`./xpfo configs`: build each named configuration (all without names),
    print the table (and with `write` record it in docs/SERIES.md); true
    when every one builds."""
    unknown = [n for n in names if n not in {c.name for c in CONFIGS}]
    if unknown:
        raise HarnessError(f"unknown configuration {unknown[0]!r}",
                           "known: " + ", ".join(c.name for c in CONFIGS))
    deps.ensure(quiet=True)
    source.prepare(layout)
    results = []
    for cfg in by_name(names):
        printer.info("configs", f"{cfg.name}: {cfg.what} (a clean build in build/cfg-{cfg.name})")
        r = build_one(cfg, layout, jobs=jobs)
        printer.info("configs", f"{cfg.name}: {'builds' if r.ok else 'FAILS'} "
                     f"({printer.fmt_elapsed(r.elapsed)})")
        if not r.ok:
            printer.raw(r.message)
        results.append(r)
    text = table(results)
    printer.raw(text)
    if write:
        write_doc(text, layout)
    return all(r.ok for r in results)


def write_doc(text: str, layout: Layout = LAYOUT) -> Path:
    """The table as docs/SERIES.md's shipped-configurations section, the
    per-patch part kept."""
    path = series.doc_path(layout)
    head, _ = series.split_doc(path)
    path.write_text(head.rstrip("\n") + f"\n\n{series.SHIPPED_HEADING}\n\n"
                    f"Command: `./xpfo configs --write`, "
                    f"{time.strftime('%Y-%m-%d', time.gmtime())}. Each is a build from "
                    "scratch (with ccache) of `x86_64_defconfig` + `kvm_guest.config` + "
                    "the options named, at the series HEAD shown; not run in CI.\n\n"
                    f"{text}\n")
    return path
