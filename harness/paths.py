"""Where things live. Everything generated goes under build/ and out/."""

import json
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Layout:
    root: Path = ROOT

    @property
    def kernel_dir(self) -> Path:
        return self.root / "kernel"

    @property
    def patches(self) -> Path:
        return self.kernel_dir / "patches"

    @property
    def base_file(self) -> Path:
        return self.kernel_dir / "BASE"

    @property
    def fragment(self) -> Path:
        return self.kernel_dir / "config" / "xpfo.fragment"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def src(self) -> Path:
        return self.build / "src"

    @property
    def obj(self) -> Path:
        return self.build / "obj"

    @property
    def guest_build(self) -> Path:
        return self.build / "guest"

    @property
    def guest_src(self) -> Path:
        return self.root / "guest"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def bzimage(self) -> Path:
        return self.obj / "arch" / "x86" / "boot" / "bzImage"

    @property
    def build_stamp(self) -> Path:
        return self.obj / ".xpfo-build-ok"

    @property
    def initramfs(self) -> Path:
        return self.guest_build / "initramfs.cpio"


LAYOUT = Layout()


def write_json(path: Path, data: object) -> None:
    """Write atomically: a failed run never leaves a half-written result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
