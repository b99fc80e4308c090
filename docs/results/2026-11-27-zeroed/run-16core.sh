#!/bin/bash
# Multi-threaded TCG on a many-core host: one host core per vCPU. Needs
# out/dev/bundle.tar.xz (QEMU 7.2 binary, its non-glibc libraries, firmware,
# accel-tcg-x86_64.so, the bzImage and the initramfs) and $OUT for the logs.
TMP=${TMP:-/tmp}
mkdir -p $TMP/q && tar -xJf out/dev/bundle.tar.xz -C $TMP/q || exit 1
cd $TMP/q
export LD_LIBRARY_PATH=$TMP/q/lib QEMU_MODULE_DIR=$TMP/q/mod
truncate -s 2G scratch.img
./qemu-system-x86_64 --version | head -1
nproc
mkdir -p $TMP/logs; start=$(date +%s)
for r in 0 1; do for c in 1 4 8; do for m in off strict strict+pgt-batched; do
  case $m in off) a="xpfo=off";; strict) a="xpfo=strict";; *) a="xpfo=strict pgtprot=batched";; esac
  log=$TMP/logs/bench-$m-${c}cpu-r$r.log
  t0=$(date +%s)
  timeout 90 ./qemu-system-x86_64 -L $TMP/q/fw -accel tcg,thread=multi -cpu max -smp $c -m 2048 \
    -kernel bzImage -initrd initramfs.cpio \
    -append "console=ttyS0 panic=-1 loglevel=7 no_timer_check $a xh.steps=vmstat:start,sh:xbench:page_fault:64:$c,vmstat:0,sh:xbench:fork:256,vmstat:1,sh:xbench:exec,vmstat:2" \
    -no-reboot -nodefaults -display none -serial stdio -monitor none \
    -serial file:$log.ttyS1 -drive file=scratch.img,if=virtio,format=raw,cache=unsafe,snapshot=on > $log 2>&1
  echo "r$r $m ${c}cpu rc=$? $(( $(date +%s) - t0 ))s"
  [ $(( $(date +%s) - start )) -gt 480 ] && { echo "stopping: time"; break 3; }
done; done; done
tar -czf $OUT/logs.tgz -C $TMP/logs .
