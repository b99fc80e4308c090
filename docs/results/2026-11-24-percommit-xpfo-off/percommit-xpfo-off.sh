#!/bin/bash
# Each commit 3..54 of the series at its own commit, XPFO and pgtprot off:
# make prepare, then the objects of the C files it touches plus a core set
# of files that carry XPFO hooks, KCFLAGS=-Werror.
TMP=${TMP:-/tmp}   # a temporary folder; paths below are relative to the repository
WT=$TMP/wt50; O=$TMP/wt-noxpfo-obj; SRC=build/src
CORE="mm/highmem.o mm/memory.o mm/page_alloc.o lib/iov_iter.o mm/util.o mm/shmem.o mm/vmstat.o mm/migrate.o mm/filemap.o kernel/sched/core.o"
M="make -s -C $WT O=$O -j${JOBS:-1} CC=ccache\ gcc"
for n in $(seq ${FIRST:-3} ${LAST:-54}); do
  c=$(git -C $SRC rev-list --reverse 6774eae..HEAD | sed -n ${n}p)
  git -C $WT checkout -q --detach $c || { echo "$n $c CHECKOUT-FAIL"; continue; }
  objs=$(git -C $SRC show --name-only --format= $c | grep '\.c$' | grep -v -E '^tools/|xpfo|pgtprot' | grep -v -x 'kernel/sched/idle.c' | sed 's/\.c$/.o/' | tr '\n' ' ')
  objs=$(for o in $objs; do [ -e $O/$o ] && echo -n "$o "; done)
  t0=$(date +%s)
  : >$TMP/pc-$n.log
  x=$(grep -c "^CONFIG_XPFO=y\|^CONFIG_PGTPROT=y" $O/.config)
  if ! make -s -C $WT O=$O -j${JOBS:-1} CC="ccache gcc" KCFLAGS=-Werror prepare >>$TMP/pc-$n.log 2>&1; then echo "$n ${c:0:7} PREPARE-FAIL"; continue; fi
  if make -s -C $WT O=$O -j${JOBS:-1} CC="ccache gcc" KCFLAGS=-Werror $CORE $objs >>$TMP/pc-$n.log 2>&1; then r=OK; else r=FAIL; fi
  echo "$n ${c:0:7} xpfo/pgtprot-y=$x $r $(( $(date +%s)-t0 ))s :: $objs"
done
