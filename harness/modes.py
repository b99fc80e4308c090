"""A run's mode: an XPFO mode, optionally with a pgtprot mode.

``strict`` is xpfo=strict with pgtprot off; ``pgt-batched`` is pgtprot=batched
with XPFO off; ``strict+pgt-batched`` is both. Every command takes these names
and boots the same kernel binary with the matching parameters.
"""

from typing import List, Tuple

from .errors import HarnessError

XPFO_MODES = ("off", "sync", "deferred", "batch", "strict")
PGT_MODES = ("off", "eager", "batched")
# pgtprot modes the commands offer, alone and combined with strict XPFO;
# eager (a protection-key switch pair per store) is what batched (a pair per
# lazy-MMU section) is measured against
PGT_RUN_MODES = ("pgt-eager", "pgt-batched", "strict+pgt-batched")
ALL_MODES = XPFO_MODES + PGT_RUN_MODES


def split(mode: str) -> Tuple[str, str]:
    """``strict+pgt-batched`` -> ("strict", "batched"); ``sync`` -> ("sync", "off")."""
    xpfo, pgt = "off", "off"
    for part in mode.split("+"):
        if part.startswith("pgt-") and part[4:] in PGT_MODES[1:] and pgt == "off":
            pgt = part[4:]
        elif part in XPFO_MODES and xpfo == "off":
            xpfo = part
        else:
            raise HarnessError(f"unknown mode {mode!r}",
                               f"use one of: {', '.join(ALL_MODES)}")
    return xpfo, pgt


def xpfo(mode: str) -> str:
    return split(mode)[0]


def pgt(mode: str) -> str:
    return split(mode)[1]


def params(mode: str) -> List[str]:
    x, p = split(mode)
    return [f"xpfo={x}"] + ([f"pgtprot={p}"] if p != "off" else [])


def label(mode: str) -> str:
    """How tables name the mode: ``xpfo=strict pgtprot=batched``; a name
    that is not a mode (``vanilla``) as it is."""
    try:
        return " ".join(params(mode))
    except HarnessError:
        return mode
