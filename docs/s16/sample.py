import socket, sys, time, re, subprocess, bisect, collections
mode = sys.argv[1]; secs = float(sys.argv[2])
sock = f"/tmp/prof/mon-{mode}.sock"
q = subprocess.Popen(["qemu-system-x86_64", "-accel", "tcg,thread=single", "-icount", "shift=0,sleep=off", "-cpu", "max", "-smp", "1", "-m", "1024",
    "-kernel", "/tmp/k/bz58", "-initrd", "/work/main/build/guest/initramfs.cpio",
    "-append", f"console=ttyS0 panic=-1 loglevel=7 no_timer_check nokaslr tsc=reliable xpfo={mode} xh.steps=" + ",".join(["sh:xbench:lseek"] * 6),
    "-no-reboot", "-nodefaults", "-display", "none", "-serial", f"file:/tmp/prof/s-{mode}.console", "-serial", "null",
    "-monitor", f"unix:{sock},server=on,wait=off"])
time.sleep(1.0)
s = socket.socket(socket.AF_UNIX); s.connect(sock); s.settimeout(5)
def cmd(c):
    s.sendall(c.encode() + b"\n"); buf = b""
    while not buf.rstrip().endswith(b"(qemu)"):
        buf += s.recv(65536)
    return buf.decode(errors="replace")
cmd("")
# wait for the lseek loop: skip boot
time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 3.0)
rips = []
t0 = time.time()
while time.time() - t0 < secs:
    try:
        out = cmd("info registers")
    except Exception:
        break
    m = re.search(r"RIP=([0-9a-f]+)", out)
    if m: rips.append(int(m.group(1), 16))
    time.sleep(0.002)
q.kill()
syms = []
for line in subprocess.run(["nm", "-n", "/work/main/build/obj/vmlinux"], capture_output=True, text=True).stdout.splitlines():
    a, t, n = line.split()[:3]
    if t in "tTwW": syms.append((int(a, 16), n))
addrs = [a for a, _ in syms]
c = collections.Counter()
for r in rips:
    if r < 0xffff800000000000: c["<user>"] += 1; continue
    i = bisect.bisect_right(addrs, r) - 1
    c[syms[i][1] if i >= 0 else "?"] += 1
print(mode, len(rips))
for n, k in c.most_common(40): print(f"{k:6d} {n}")
