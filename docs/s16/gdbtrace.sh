#!/bin/bash
# usage: gdbtrace.sh mode  -> /tmp/prof/trace-$mode.txt (pcs of one lseek syscall from ksys_lseek to user)
m=$1
qemu-system-x86_64 -accel tcg,thread=single -cpu max -smp 1 -m 1024 -kernel /tmp/k/bz58 -initrd /work/main/build/guest/initramfs.cpio -append "console=ttyS0 panic=-1 loglevel=7 no_timer_check nokaslr xpfo=$m xh.steps=sh:xbench:lseek,sh:xbench:lseek,sh:xbench:lseek" -no-reboot -nodefaults -display none -serial file:/tmp/prof/gdb-$m.console -monitor none -serial null -gdb unix:/tmp/prof/gdb-$m.sock,server=on,wait=off -S &
qpid=$!
sleep 1
cat > /tmp/prof/g-$m.gdb <<EOG
set pagination off
set confirm off
target remote /tmp/prof/gdb-$m.sock
hbreak __x64_sys_lseek
continue
delete
set \$n = 0
while (\$pc >= 0xffff800000000000 && \$n < 3000)
  stepi
  set \$n = \$n + 1
end
printf "steps to user: %d\n", \$n
hbreak __x64_sys_lseek
continue
delete
set \$n = 0
set logging file /tmp/prof/trace-$m.txt
set logging overwrite on
set logging redirect on
set logging enabled on
while (\$pc >= 0xffff800000000000 && \$n < 3000)
  x/i \$pc
  stepi
  set \$n = \$n + 1
end
set logging enabled off
printf "steps to user: %d\n", \$n
kill
quit
EOG
sleep 3
timeout 300 gdb -batch -x /tmp/prof/g-$m.gdb /work/main/build/obj/vmlinux 2>&1 | tail -5
kill $qpid 2>/dev/null; wait $qpid 2>/dev/null
