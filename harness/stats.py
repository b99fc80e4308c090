"""Statistics over benchmark samples: medians, ranges and paired ratios."""

import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    lo: float
    hi: float


def summarize(values: Sequence[float]) -> Optional[Summary]:
    if not values:
        return None
    return Summary(len(values), statistics.median(values), min(values), max(values))


def paired_ratios(mode: Dict[int, float], base: Dict[int, float], better: str) -> List[float]:
    """Overhead per round: >1 means `mode` is worse than `base` in that round.

    For a 'lower is better' figure (time) this is mode/base; for 'higher is
    better' (throughput) it is base/mode. Rounds missing on either side are
    left out, never averaged over.
    """
    out = []
    for rnd, v in mode.items():
        b = base.get(rnd)
        if b is None or v is None or b <= 0 or v <= 0:
            continue
        out.append(v / b if better == "lower" else b / v)
    return out


def per_thousand(events: float, pages: float) -> Optional[float]:
    if pages <= 0:
        return None
    return 1000.0 * events / pages


def log2_percentile(buckets: Dict[int, int], q: float) -> Optional[int]:
    """Upper bound of the q-quantile of a histogram of log2 buckets.

    buckets maps a bucket's upper bound (ns) to its count.
    """
    total = sum(buckets.values())
    if not total:
        return None
    seen = 0
    for bound in sorted(buckets):
        seen += buckets[bound]
        if seen >= q * total:
            return bound
    return max(buckets)
