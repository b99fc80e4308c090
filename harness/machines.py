"""The machine kinds a guest can boot on, as data (kunit's qemu_configs).

Each kind is one emulator with one CPU model: what the flushes and the
page-table protection depend on (PTI, PCID/INVPCID, CET, PKS) differs
between them, and ``-cpu max`` alone hides some of it (see DESIGN's CPU
classes). ``./xpfo boot --machine KIND`` and ``./xpfo test --machines
KIND...`` take these names.
"""

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from .errors import HarnessError

QEMU = "qemu"
BOCHS = "bochs"

# Bochs's speed on this host (about 75 million instructions a second per
# emulated CPU): its `ips`, so that a guest second costs about a wall second
# and the guest's timers fire at the pace they were written for.
BOCHS_IPS = 75_000_000
# Kernel parameters of every Bochs machine:
# - clearcpuid=: Bochs 2.7's tigerlake reports CPUID that 6.12 WARNs about
#   at boot, which would fail every run: the legacy topology leaf counts 4
#   cores with HT set in a 1-thread package (topology_common.c:57), PKRU's
#   XSAVE component has size 0 and an offset out of order (xstate.c:254,
#   :550), and the AVX-512 components' offsets do not add up to the XSAVE
#   size (xstate.c:605). And aperfmperf: Bochs has no APERF/MPERF MSRs,
#   and the scheduler tick's reads of them fill Bochs's log (35 KB a
#   second). None is something XPFO or pgtprot uses; the kernel is tainted
#   "CPU out of spec", nothing else.
# - noxsave: with XSAVE, 2 attack boots of 17 on bochs-tgl (strict, and
#   pgt-batched with XPFO off, so XPFO is not involved) took a #GP in
#   XRSTOR(S) on a freshly forked task's FPU state in the symlink step
#   ("Bad FPU state detected at restore_fpregs_from_fpstate"), the fault an
#   invalid XSAVE header gives, with XSAVES and with XSAVEC's compacted
#   format alike; Bochs's XSAVE CPUID leaves already disagree with
#   themselves (above), and QEMU never showed it in hundreds of boots. The
#   kernel then saves the FPU with FXSAVE, which nothing here depends on.
BOCHS_PARAMS = ("clearcpuid=pku,ht,avx512f,aperfmperf", "noxsave", "idle=halt",
                f"tsc_early_khz={BOCHS_IPS // 1000}")


@dataclass(frozen=True)
class Kind:
    """One machine kind. `cpus`: a fixed CPU count (None: --cpus decides);
    `params`: kernel parameters this kind always adds."""

    name: str
    emulator: str               # QEMU or BOCHS
    cpu_model: str              # -cpu for QEMU, cpu: model= for Bochs
    description: str
    cpus: Optional[int] = None
    params: Tuple[str, ...] = ()
    has_disk: bool = True       # virtio disks (the scratch disk, the build image)
    has_pks: bool = False
    has_pcid: bool = False      # PCID and INVPCID
    has_cet: bool = False       # CET: IBT, CR0.WP writes #GP while CR4.CET is set
    # a guest deadline on this kind is the command's deadline times this
    slowdown: float = 1.0
    # the console= parameter: Bochs times its UART by the baud rate (Linux's
    # default 9600 baud costs ~1 ms of guest time per character), QEMU does not
    console: str = "ttyS0"

    def vcpus(self, requested: int) -> int:
        return self.cpus if self.cpus is not None else requested


KINDS: Dict[str, Kind] = {k.name: k for k in (
    Kind("qemu", QEMU, "max",
         "QEMU TCG -cpu max: PKS, no PCID/INVPCID, no CET; PTI off (not Meltdown-affected)",
         has_pks=True),
    Kind("qemu-pti", QEMU, "max",
         "QEMU TCG -cpu max with pti=on: user/kernel page-table copies, "
         "a non-global direct map",
         params=("pti=on",), has_pks=True),
    Kind("bochs-tgl", BOCHS, "tigerlake",
         "Bochs 2.7 tigerlake, 1 CPU: PCID, INVPCID, global pages kept across CR3 "
         "writes, CET (IBT); no PKS, no virtio disk",
         cpus=1, params=BOCHS_PARAMS, has_disk=False, has_pcid=True, has_cet=True, slowdown=4.0,
         console="ttyS0,115200"),
    Kind("bochs-2cpu", BOCHS, "tigerlake",
         "Bochs 2.7 tigerlake, 2 CPUs: PCID, INVPCID, global pages kept across CR3 "
         "writes, CET (IBT), remote flushes by IPI; no PKS, no virtio disk",
         cpus=2, params=BOCHS_PARAMS, has_disk=False,
         has_pcid=True, has_cet=True, slowdown=6.0, console="ttyS0,115200"),
    Kind("bochs-pti", BOCHS, "tigerlake",
         "Bochs 2.7 tigerlake, 2 CPUs, pti=on: PCID and INVPCID with user/kernel "
         "page-table copies, a non-global direct map, CET (IBT); no PKS, no virtio disk",
         cpus=2, params=BOCHS_PARAMS + ("pti=on",), has_disk=False,
         has_pcid=True, has_cet=True, slowdown=6.0, console="ttyS0,115200"),
)}
DEFAULT = "qemu"


def get(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise HarnessError(f"unknown machine {name!r}",
                           f"use one of: {', '.join(KINDS)}") from None
