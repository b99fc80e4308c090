#!/bin/bash
# usage: ic-steps.sh label img "params" steps
lab=$1 img=$2 params=$3 steps=$4
out=/tmp/prof/ic-$lab.ttyS1
rm -f $out
timeout 300 qemu-system-x86_64 -accel tcg,thread=single -icount shift=0,sleep=off -cpu max -smp 1 -m 2048 -kernel $img -initrd /work/main/build/guest/initramfs.cpio -append "console=ttyS0 panic=-1 loglevel=7 no_timer_check $params xh.steps=$steps" -no-reboot -nodefaults -display none -serial file:/tmp/prof/ic-$lab.console -monitor none -serial file:$out >/dev/null 2>&1
echo "$lab $(grep -a 'RESULT' $out | grep -v vmstat | python3 -c 'import sys,json; print(" ".join("%s=%.6f"%(json.loads(l.split(" ",2)[2]).get("workload"),json.loads(l.split(" ",2)[2])["seconds"]) for l in sys.stdin if "seconds" in l))')"
