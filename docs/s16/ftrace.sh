#!/bin/bash
# usage: ftrace.sh mode -> per-function instruction counts of one free_unref_folios() call during xbench mmap's munmap
m=$1
rm -f /tmp/prof/f-$m.console /tmp/prof/fgdb-$m.sock
qemu-system-x86_64 -accel tcg,thread=single -cpu max -smp 1 -m 1024 -kernel /tmp/k/bz60f -initrd /work/main/build/guest/initramfs.cpio -append "console=ttyS0 panic=-1 loglevel=7 no_timer_check nokaslr xpfo=$m xh.steps=sh:xbench:mmap:64,sh:xbench:mmap:64,sh:xbench:mmap:64" -no-reboot -nodefaults -display none -serial file:/tmp/prof/f-$m.console -monitor none -serial null -gdb unix:/tmp/prof/fgdb-$m.sock,server=on,wait=off &
qpid=$!
for i in $(seq 200); do grep -q "XH-STEP-BEGIN sh:xbench:mmap" /tmp/prof/f-$m.console 2>/dev/null && break; sleep 0.05; done
sleep 0.3
cat > /tmp/prof/f-$m.gdb <<EOG
set pagination off
set confirm off
target remote /tmp/prof/fgdb-$m.sock
hbreak free_unref_folios
continue
continue
continue
delete
set \$sp0 = \$sp
set logging file /tmp/prof/ftrace-$m.txt
set logging overwrite on
set logging redirect on
set logging enabled on
set \$n = 0
while (\$n < 40000)
  printf "%lx\n", \$pc
  stepi
  set \$n = \$n + 1
  if (\$sp > \$sp0)
    loop_break
  end
end
set logging enabled off
printf "steps: %d\n", \$n
kill
quit
EOG
timeout 600 gdb -batch -x /tmp/prof/f-$m.gdb /work/main/build/obj/vmlinux 2>&1 | grep -a "steps:"
kill $qpid 2>/dev/null; wait $qpid 2>/dev/null
