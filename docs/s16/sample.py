"""Where a guest spends its time, sampled from the host: boot bz60 (or
$KERNEL) under icount with six lseek runs, read RIP through QEMU's monitor
every 2 ms for SECONDS, and count the samples per kernel function.
Usage: python3 sample.py MODE SECONDS [SKIP_SECONDS]"""

import collections
import os
import re
import socket
import subprocess
import sys
import time

from ksyms import Symbols


def main() -> None:
    mode, secs = sys.argv[1], float(sys.argv[2])
    skip = float(sys.argv[3]) if len(sys.argv) > 3 else 3.0
    sock = f"/tmp/prof/mon-{mode}.sock"
    steps = ",".join(["sh:xbench:lseek"] * 6)
    q = subprocess.Popen([
        "qemu-system-x86_64", "-accel", "tcg,thread=single", "-icount", "shift=0,sleep=off",
        "-cpu", "max", "-smp", "1", "-m", "1024",
        "-kernel", os.environ.get("KERNEL", "/tmp/k/bz60"),
        "-initrd", "/work/main/build/guest/initramfs.cpio",
        "-append", "console=ttyS0 panic=-1 loglevel=7 no_timer_check nokaslr tsc=reliable "
                   f"xpfo={mode} xh.steps={steps}",
        "-no-reboot", "-nodefaults", "-display", "none",
        "-serial", f"file:/tmp/prof/s-{mode}.console", "-serial", "null",
        "-monitor", f"unix:{sock},server=on,wait=off"])
    time.sleep(1.0)
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.settimeout(5)

    def cmd(c: str) -> str:
        s.sendall(c.encode() + b"\n")
        buf = b""
        while not buf.rstrip().endswith(b"(qemu)"):
            buf += s.recv(65536)
        return buf.decode(errors="replace")

    cmd("")
    time.sleep(skip)    # past the boot, into the lseek runs
    rips = []
    t0 = time.time()
    while time.time() - t0 < secs:
        try:
            out = cmd("info registers")
        except OSError:
            break
        m = re.search(r"RIP=([0-9a-f]+)", out)
        if m:
            rips.append(int(m.group(1), 16))
        time.sleep(0.002)
    q.kill()
    syms = Symbols()
    c = collections.Counter(syms.name(r) for r in rips)
    print(mode, len(rips))
    for name, k in c.most_common(40):
        print(f"{k:6d} {name}")


if __name__ == "__main__":
    main()
