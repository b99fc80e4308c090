#!/bin/bash
# Guest instructions per 4K fault, free of host noise: QEMU's -icount
# shift=0,sleep=off advances the guest clock one nanosecond per guest
# instruction, so xbench's "seconds" is instructions / 1e9. Two
# page_fault:64:1 runs per boot (65,536 faults each); the second is the
# steady state. Usage: icount.sh label:bzImage:xpfo-mode ... (results in
# ic-label.ttyS1, in the current folder; the initramfs path is relative to the
# repository's top folder). Run on 2026-11-23 with $TMP/k/bz57 (patches
# 1-57) and $TMP/k/bz58 (1-58), images built outside build/ ($TMP: a
# temporary folder); each figure repeated exactly on a re-run.
for spec in "$@"; do
  IFS=: read lab img mode <<< "$spec"
  out=ic-$lab.ttyS1
  timeout 300 qemu-system-x86_64 -accel tcg,thread=single -icount shift=0,sleep=off -cpu max -smp 1 -m 1024 -kernel $img -initrd build/guest/initramfs.cpio -append "console=ttyS0 panic=-1 loglevel=7 no_timer_check xpfo=$mode xh.steps=sh:xbench:page_fault:64:1,sh:xbench:page_fault:64:1" -no-reboot -nodefaults -display none -serial null -monitor none -serial file:$out -drive file=build/guest/scratch.img,if=virtio,format=raw,cache=unsafe,snapshot=on >/dev/null 2>&1
  echo "$lab $(grep -a XH-RESULT $out | python3 -c 'import sys,json; print(" ".join("%.4f"%json.loads(l.split(" ",2)[2])["seconds"] for l in sys.stdin))')"
done
