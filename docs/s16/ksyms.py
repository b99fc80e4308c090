"""Kernel text symbols of build/obj/vmlinux, for the session 16 profiles."""

import bisect
import subprocess
from typing import List, Tuple

VMLINUX = "/work/main/build/obj/vmlinux"


class Symbols:
    def __init__(self, vmlinux: str = VMLINUX) -> None:
        out = subprocess.run(["nm", "-n", vmlinux], capture_output=True, text=True).stdout
        self.syms: List[Tuple[int, str]] = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "tTwW":
                self.syms.append((int(parts[0], 16), parts[2]))
        self.addrs = [a for a, _ in self.syms]

    def name(self, addr: int) -> str:
        if addr < 0xFFFF800000000000:
            return "<user>"
        i = bisect.bisect_right(self.addrs, addr) - 1
        return self.syms[i][1] if i >= 0 else "?"
