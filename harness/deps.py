"""Install what the project needs: Debian packages via apt-get."""

import os
import shutil
import subprocess
from typing import Dict, List

from . import printer
from .errors import HarnessError

# Debian package -> a file that shows it is installed.
PACKAGES = {
    "linux-source-6.12": "/usr/src/linux-source-6.12.tar.xz",
    "qemu-system-x86": "/usr/bin/qemu-system-x86_64",
    "busybox-static": "/bin/busybox",
    "ccache": "/usr/bin/ccache",
    "gcc": "/usr/bin/gcc",
    "make": "/usr/bin/make",
    "bc": "/usr/bin/bc",
    "bison": "/usr/bin/bison",
    "flex": "/usr/bin/flex",
    "libelf-dev": "/usr/include/libelf.h",
    "libssl-dev": "/usr/include/openssl/ssl.h",
    "libc6-dev": "/usr/include/stdio.h",
    "cpio": "/usr/bin/cpio",
    "xz-utils": "/usr/bin/xz",
    "git": "/usr/bin/git",
    "perl": "/usr/bin/perl",
    "python3-venv": "/usr/lib/python3/dist-packages",
    "e2fsprogs": "/sbin/mke2fs",
}

# Static libraries upstream's mm selftests link (./xpfo selftests only).
SELFTEST_PACKAGES = {
    "libcap-dev": "/usr/lib/x86_64-linux-gnu/libcap.a",
    "libnuma-dev": "/usr/lib/x86_64-linux-gnu/libnuma.a",
    "liburing-dev": "/usr/lib/x86_64-linux-gnu/liburing.a",
    "rsync": "/usr/bin/rsync",
}

# The Bochs machines (machines.py), installed on their first use: the
# emulator, its BIOS and VGA BIOS, and what builds the isolinux CD it boots.
BOCHS_PACKAGES = {
    "bochs": "/usr/bin/bochs-bin",
    # the x display library, drawn into a private Xvfb (bochs.py)
    "bochs-x": "/usr/lib/x86_64-linux-gnu/bochs/plugins/libbx_x_gui.so.0.0.0",
    "xvfb": "/usr/bin/Xvfb",
    "bochsbios": "/usr/share/bochs/BIOS-bochs-latest",
    "vgabios": "/usr/share/vgabios/vgabios.bin",
    "isolinux": "/usr/lib/ISOLINUX/isolinux.bin",
    "syslinux-common": "/usr/lib/syslinux/modules/bios/ldlinux.c32",
    "xorriso": "/usr/bin/xorriso",
}


def missing(packages: Dict[str, str] = PACKAGES) -> List[str]:
    return [pkg for pkg, path in packages.items() if not os.path.exists(path)]


def ensure(quiet: bool = False, packages: Dict[str, str] = PACKAGES) -> None:
    need = missing(packages)
    if not need:
        if not quiet:
            printer.info("setup", "all Debian packages present")
        return
    if shutil.which("apt-get") is None:
        raise HarnessError(f"missing packages {' '.join(need)} and no apt-get",
                           "install them with your distribution's package manager")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    printer.info("setup", f"installing {' '.join(need)}")
    for cmd in (sudo + ["apt-get", "update", "-q"],
                sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", *need]):
        printer.command(cmd)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise HarnessError(f"{' '.join(cmd[:3])} failed:\n{r.stdout[-1500:]}{r.stderr[-1500:]}",
                               "check the network to Debian's mirrors and free disk space")
    still = missing(packages)
    if still:
        raise HarnessError(f"packages still missing after apt-get: {' '.join(still)}")
