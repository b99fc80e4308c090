"""A run's mode: an XPFO mode, optionally with a pgtprot mode and the
direct map's global-bit policy.

``strict`` is xpfo=strict with pgtprot off; ``pgt-batched`` is pgtprot=batched
with XPFO off; ``strict+pgt-batched`` is both; ``strict+nonglobal`` is
xpfo=strict with xpfo_dmap=nonglobal (the kernel mapped non-global apart from
its image, flushed with INVPCID type 3, against the default global direct
map). Every command takes these names and boots the same kernel binary with
the matching parameters.
"""

from typing import List, Tuple

from .errors import HarnessError

XPFO_MODES = ("off", "sync", "deferred", "batched", "strict")
# earlier names the commands still take: xpfo=batch was renamed batched, as
# pgtprot's mode is named (the kernel takes both)
ALIASES = {"batch": "batched"}
PGT_MODES = ("off", "eager", "batched")
# pgtprot modes the commands offer, alone and combined with strict XPFO;
# eager (a protection-key switch pair per store) is what batched (a pair per
# lazy-MMU section) is measured against
PGT_RUN_MODES = ("pgt-eager", "pgt-batched", "strict+pgt-batched")
# the direct map's global-bit policy (b), with XPFO off (what a non-global
# kernel costs by itself) and strict; policy (a), a global direct map, is
# every other mode's
NONGLOBAL = "nonglobal"
DMAP_RUN_MODES = ("off+nonglobal", "strict+nonglobal")
ALL_MODES = XPFO_MODES + PGT_RUN_MODES + DMAP_RUN_MODES
# the recommended configuration: xpfo=strict pgtprot=batched (pgtprot needs
# a CPU with PKS: without one the kernel refuses it at boot and runs strict)
RECOMMENDED = "strict+pgt-batched"


def canonical(mode: str) -> str:
    """The mode under its current name: ``batch+nonglobal`` -> ``batched+nonglobal``."""
    return "+".join(ALIASES.get(part, part) for part in mode.split("+"))


def _parts(mode: str) -> Tuple[str, str, str]:
    xpfo, pgt, dmap = "off", "off", "global"
    seen_xpfo = False
    for part in canonical(mode).split("+"):
        if part.startswith("pgt-") and part[4:] in PGT_MODES[1:] and pgt == "off":
            pgt = part[4:]
        elif part in XPFO_MODES and not seen_xpfo:
            xpfo, seen_xpfo = part, True
        elif part == NONGLOBAL and dmap == "global":
            dmap = NONGLOBAL
        else:
            raise HarnessError(f"unknown mode {mode!r}",
                               f"use one of: {', '.join(ALL_MODES)}")
    return xpfo, pgt, dmap


def split(mode: str) -> Tuple[str, str]:
    """``strict+pgt-batched`` -> ("strict", "batched"); ``sync`` -> ("sync", "off")."""
    xpfo, pgt, _ = _parts(mode)
    return xpfo, pgt


def dmap(mode: str) -> str:
    """The direct map's global-bit policy: "global" or "nonglobal"."""
    return _parts(mode)[2]


def xpfo(mode: str) -> str:
    return split(mode)[0]


def pgt(mode: str) -> str:
    return split(mode)[1]


def params(mode: str) -> List[str]:
    x, p, d = _parts(mode)
    return ([f"xpfo={x}"] + ([f"pgtprot={p}"] if p != "off" else [])
            + ([f"xpfo_dmap={d}"] if d != "global" else []))


def label(mode: str) -> str:
    """How tables name the mode: ``xpfo=strict pgtprot=batched``; a name
    that is not a mode (``vanilla``) as it is."""
    try:
        return " ".join(params(mode))
    except HarnessError:
        return mode
