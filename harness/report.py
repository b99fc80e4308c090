"""Benchmark reports: Markdown tables and PNG plots, from BenchData only."""

import functools
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from . import modes as modes_, stats

# The TLB flushes by what they reach: XPFO's own (global, every non-global
# entry, one address, other ASIDs left to flush) and the kernel's from any
# caller (global flushes; other ASIDs marked for a flush at a switch)
TLB_COUNTERS = [("xpfo_tlb_global", "XPFO global flushes"),
                ("xpfo_tlb_nonglobal", "XPFO non-global flushes"),
                ("xpfo_tlb_one", "XPFO one-address flushes"),
                ("xpfo_tlb_other_asids", "XPFO other-ASID flushes"),
                ("xpfo_flush_ipi_sent", "XPFO flush IPIs"),
                ("nr_tlb_local_flush_global", "global flushes (all)"),
                ("nr_tlb_other_asids", "other-ASID flushes (all)")]

COUNTERS = [("xpfo_unmap", "unmaps"), ("xpfo_flush", "flushes"),
            ("xpfo_flush_ipi_sent", "IPIs sent"), ("xpfo_flush_ipi_received", "IPIs recv"),
            ("xpfo_deferred_flush", "deferred flushes"),
            # sync/strict: flushes asked of CPUs in user mode or idle
            # instead of an IPI, and taken when they were busy again
            ("xpfo_quiet_request", "quiet requests"),
            ("xpfo_quiet_flush", "quiet flushes"),
            # strict: free frames a refill that flushed anyway unmapped
            # ahead, in blocks, for the refills to come
            ("xpfo_refill_ahead", "unmapped ahead"),
            ("xpfo_batch_preflushed", "served pre-flushed"),
            ("xpfo_batch_kept", "freed unmapped"), ("xpfo_kmap", "kmaps"),
            # INVLPGs and full flushes this CPU did for itself (DEBUG_TLBFLUSH)
            ("tlb_local", "local TLB flushes"),
            # what clearing freed user frames before their alias is back costs;
            # a kept frame that never held user data is mapped back uncleared
            ("xpfo_clear", "cleared before remap"), ("xpfo_remap", "mapped back"),
            # zeroed kernel allocations of frames XPFO had cleared (on their
            # way back or ahead of a fault): no second clear
            ("xpfo_clear_spared", "zeroed, no 2nd clear"),
            # strict: user frames cleared ahead of their fault, in batches, and
            # the user faults that got one and skipped their clear
            ("xpfo_zeroed", "cleared ahead"),
            ("xpfo_zeroed_used", "faults without a clear"),
            # strict: free user frames the SCHED_IDLE thread cleared, in idle time
            # or in the small share such a thread gets beside busy tasks
            ("xpfo_zeroed_idle", "cleared by idle thread"),
            ("xpfo_atomic", "atomic allocs"),
            # the huge-page policy, visible: a 4K workload has about 1000 page
            # faults per 1000 pages, a THP one about 2 THP faults
            ("pgfault", "page faults"), ("thp_fault_alloc", "THP faults"),
            # pgtprot: write windows opened (summed over what they were
            # for), stores that opened one of their own, and the IA32_PKRS
            # writes that opened and closed them
            ("pgtprot_windows", "pgt windows"), ("pgtprot_writes", "pgt eager stores"),
            ("pgtprot_pkrs_switch", "PKRS switches"),
            ("pgtprot_protect", "pgt tables protected"),
            # page tables handed out from pgtprot's pool: no protect, no flush
            ("pgtprot_pool_reuse", "pgt tables from pool")]


def _ratio(a: float, b: float) -> Optional[float]:
    return a / b if b else None


def _median_of(samples: List[dict], f: Callable[[dict], Optional[float]]) -> str:
    """The median of f over the samples that have it, formatted; "-" if none."""
    vals = [v for v in map(f, samples) if v is not None]
    return _fmt(statistics.median(vals)) if vals else "-"


def syscalls(s: dict) -> float:
    """How many system calls a calls/s workload's sample timed."""
    if s.get("unit") != "calls/s" or not s.get("value") or not s.get("seconds"):
        return 0.0
    return s["value"] * s["seconds"]


def _per_thousand_of(s: dict, key: str, base: Callable[[dict], float]) -> Optional[float]:
    return stats.per_thousand(counter(s, key), base(s))


def _tlb_table(idx, workloads, modes, cpus) -> List[str]:
    """TLB flushes by kind, per 1000 user pages (or, for a workload of
    system calls, per 1000 calls), median over rounds; only for kernels
    that count them."""
    rows = []
    for w in workloads:
        for m in modes:
            samples = [x for x in (idx.get((w, cpus, m)) or {}).values()
                       if "xpfo_tlb_one" in x.get("counters", {})]
            if not samples:
                continue
            per_calls = any(syscalls(x) for x in samples)
            base: Callable[[dict], float] = syscalls if per_calls else user_pages
            cells = [_median_of(samples, functools.partial(_per_thousand_of, key=k, base=base))
                     for k, _ in TLB_COUNTERS]
            rows.append(f"| {w} | {m} | {'calls' if per_calls else 'user pages'} | "
                        + " | ".join(cells) + " |")
    if not rows:
        return []
    return (["TLB flushes by what they reach, per 1000 user pages (per 1000 system calls "
             "for a workload of calls), median over rounds:\n",
             "| workload | mode | per 1000 | " + " | ".join(n for _, n in TLB_COUNTERS) + " |",
             "|---|---|---|" + "---|" * len(TLB_COUNTERS)] + rows + [""])


def counter(s: dict, key: str) -> int:
    """One kernel event count of a sample; tlb_local is the sum of the
    kernel's local TLB flush counters (one page and all)."""
    c = s["counters"]
    if key == "tlb_local":
        return c.get("nr_tlb_local_flush_one", 0) + c.get("nr_tlb_local_flush_all", 0)
    if key == "pgtprot_windows" and key not in c:
        # results of kernels before series v4 counted windows by context
        return sum(v for k, v in c.items() if k.startswith(key + "_"))
    return c.get(key, 0)


OP_UNITS = {"us/fork": 1e6, "ms/munmap": 1e3}


def ops(s: dict) -> float:
    """How many operations a fork or munmap workload's sample timed (value
    is us/fork or ms/munmap over `seconds`); 0 for any other unit."""
    scale = OP_UNITS.get(s.get("unit", ""))
    if not scale or not s.get("value") or not s.get("seconds"):
        return 0.0
    return s["seconds"] * scale / s["value"]


def user_pages(s: dict) -> int:
    """The denominator of the event counts: the pages the workload says it
    allocated, else the user pages the kernel handed out during it
    (xpfo_user_pages, counted in every protected mode). Logs from kernels
    without that counter fall back to the frames unmapped, which batched
    mode's reuse of unmapped frames makes too small. With XPFO off (the
    pgtprot-only modes) nothing counts user pages: the page faults stand in."""
    c = s["counters"]
    if s["user_pages"]:
        return s["user_pages"]
    if c.get("xpfo_user_pages"):
        return c["xpfo_user_pages"]
    if "xpfo_user_pages" in c:
        return c.get("pgfault", 0)
    return c.get("xpfo_unmap", 0) + c.get("xpfo_skip_atomic", 0)


def oversubscribed(meta) -> List[int]:
    return [int(c) for c in meta.get("oversubscribed", []) or []]


def judged_cpus(meta) -> List[int]:
    """The vCPU counts a target may be judged on: not more than host cores."""
    over = set(oversubscribed(meta))
    return [c for c in meta.get("cpus", []) if c not in over]


def _cpus_title(c: int, meta) -> str:
    t = f"{c} vCPU{'s' if c > 1 else ''}"
    return t + " (oversubscribed)" if c in oversubscribed(meta) else t


def _index(samples: List[dict]) -> Dict[Tuple[str, int, str], Dict[int, dict]]:
    idx: Dict[Tuple[str, int, str], Dict[int, dict]] = defaultdict(dict)
    for s in samples:
        idx[(s["workload"], s["cpus"], s["mode"])][s["round"]] = s
    return idx


def _ns(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.1f} ms"
    if x >= 1e3:
        return f"{x / 1e3:.1f} us"
    return f"{x:.0f} ns"


def _fmt(x: float) -> str:
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def ratio_summary(idx, workload: str, cpus: int, mode: str,
                  base: str = "off") -> Optional[stats.Summary]:
    cell, ref = idx.get((workload, cpus, mode)), idx.get((workload, cpus, base))
    if not cell or not ref:
        return None
    better = next(iter(cell.values()))["better"]
    return stats.summarize(stats.paired_ratios(
        {r: s["value"] for r, s in cell.items()}, {r: s["value"] for r, s in ref.items()},
        better))


ICOUNT_NOTE = (
    "**Guest instructions, not time.** This run booted every guest with QEMU's "
    "`-icount shift=0,sleep=off`: the guest clock advances one nanosecond per guest "
    "instruction, so each timed figure below counts the instructions the guest ran "
    "(`pages/s` is pages per 10^9 instructions; a build's system time is the "
    "instructions the kernel ran for it, as the tick accounts them). They are not "
    "costs: QEMU counts each iteration of a `rep` string instruction as one (a page "
    "cleared by `rep stosb` is 4,096), and a TLB refill, an INVLPG or a cache miss as "
    "one instruction or none. A boot whose workloads all keep the CPU busy repeats "
    "its counts exactly, whatever the host does. A workload that waits for the disk "
    "(the build, `disk_read`) does not: its own elapsed time also counts the idle time "
    "QEMU skips to the next timer (`build_elapsed` and `disk_read` are not instruction "
    "counts), and the state it leaves depends on when the host finished the I/O, so "
    "the counts of the workloads after it vary somewhat from run to run. With more "
    "than one vCPU, the vCPUs run in turn on one host thread and the figure is the sum "
    "over them.\n")


def _instructions(s: dict) -> float:
    """A sample's guest instructions under icount: its timed part, or for a
    figure that is itself a time in seconds (the build's), that figure."""
    return (s["value"] if s.get("unit") == "s" else s["seconds"]) * 1e9


def icount_table(data) -> str:
    """The instructions of each workload's timed part, per page the workload
    says it touched, and the paired ratio to off (a run with --icount)."""
    idx = _index(data.samples)
    modes: List[str] = list(data.meta.get("modes", []))
    workloads: List[str] = []
    for s in data.samples:
        if s["workload"] not in workloads:
            workloads.append(s["workload"])
    rows = []
    for cpus in data.meta.get("cpus", []):
        for w in workloads:
            ref = idx.get((w, cpus, "off"))
            for mode in modes:
                cell = idx.get((w, cpus, mode))
                instr = stats.summarize([_instructions(s) for s in (cell or {}).values()])
                if not cell or not instr:
                    continue
                pages = [s["user_pages"] for s in cell.values() if s.get("user_pages")]
                per_page = (f"{instr.median / statistics.median(pages):,.0f}"
                            if pages else "-")
                r = None
                if ref and mode != "off":
                    r = stats.summarize(stats.paired_ratios(
                        {k: _instructions(s) for k, s in cell.items()},
                        {k: _instructions(s) for k, s in ref.items()}, "lower"))
                rows.append(f"| {w} | {cpus} | {modes_.label(mode)} | "
                            f"{instr.median / 1e6:,.1f} | {per_page} | "
                            + (f"{r.median:.3f}x |" if r else "- |"))
    if not rows:
        return ""
    return "\n".join(["| workload | vCPUs | mode | instructions (millions, median) | "
                      "per page touched | mode/off |", "|---|---|---|---|---|---|"]
                     + rows) + "\n"


def headline(data, workload: str = "build_sys") -> str:
    """The published XPFO table's shape: system time of the build, ratio to
    off, per mode and vCPU count, with flush IPIs per 1000 user pages."""
    idx = _index(data.samples)
    cpus_list = judged_cpus(data.meta)
    modes = [m for m in data.meta.get("modes", []) if m != "off"]
    if not cpus_list or not any(w == workload for w, _, _ in idx):
        return ""
    out = [f"`{workload}` of the in-guest build, ratio to `off` (median [min–max] of "
           "per-round ratios); flush IPIs sent per 1000 user pages in brackets.\n",
           "| mode | " + " | ".join(f"{c} vCPU{'s' if c > 1 else ''}" for c in cpus_list) + " |",
           "|---|" + "---|" * len(cpus_list)]
    for m in modes:
        cells = []
        for c in cpus_list:
            r = ratio_summary(idx, workload, c, m)
            cell = idx.get((workload, c, m), {})
            ipis = stats.summarize([v for v in (stats.per_thousand(
                s["counters"].get("xpfo_flush_ipi_sent", 0), user_pages(s))
                for s in cell.values()) if v is not None])
            txt = f"{r.median:.2f}x [{r.lo:.2f}–{r.hi:.2f}]" if r else "n/a"
            if ipis:
                txt += f" ({_fmt(ipis.median)} IPIs/1k)"
            cells.append(txt)
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    over = oversubscribed(data.meta)
    if over:
        out.append(f"\n{', '.join(map(str, over))} vCPUs: oversubscribed (more vCPUs than "
                   "host cores), left out of the headline and the targets.")
    return "\n".join(out) + "\n"


def tables(data) -> str:
    samples, failures, meta = data.samples, data.failures, data.meta
    idx = _index(samples)
    modes: List[str] = list(meta.get("modes", []))
    workloads: List[str] = []
    for s in samples + failures:
        if s["workload"] not in workloads:
            workloads.append(s["workload"])
    failed = {(f["workload"], f["cpus"], f["mode"]): f["reason"] for f in failures}
    out: List[str] = []
    if meta.get("icount"):
        out += [ICOUNT_NOTE, "### Guest instructions per workload\n", icount_table(data)]
    head = headline(data)
    if head:
        out += ["### Headline: system time of a parallel build\n", head]
    goals = targets(data)
    if goals:
        out += ["### Targets\n", goals]
    policy = meta.get("policy") or {}
    if policy:
        out += ["### Huge-page policy of each workload\n",
                "The guest's THP setting is `always`; a workload whose cell fails its "
                "check is listed with the failed cells.\n",
                "| workload | policy |", "|---|---|"]
        out += [f"| {w} | {policy[w]} |" for w in workloads if policy.get(w)]
        out.append("")
    checks = check_table(data)
    if checks:
        out += ["Counts the policy is checked by (median over rounds; fork's at its "
                "set-up, the others over the timed part):\n", checks]
    for cpus in meta.get("cpus", []):
        out.append(f"### {_cpus_title(cpus, meta)}\n")
        if cpus in oversubscribed(meta):
            out.append(f"**Oversubscribed**: {cpus} vCPUs on {meta.get('host_cpus', '?')} "
                       "host cores. These figures measure the host's scheduler as much as "
                       "the kernel; no target is judged on them.\n")
        out.append("Median [min–max] over rounds; overhead = paired ratio to `off` per "
                   "round (>1 is slower), median [min–max].\n")
        head = "| workload | unit | " + " | ".join(modes_.label(m) for m in modes)
        head += " | " + " | ".join(f"{m}/off" for m in modes if m != "off") + " |"
        out.append(head)
        out.append("|---|---|" + "---|" * (len(modes) + len([m for m in modes if m != "off"])))
        for w in workloads:
            cells, unit = [], ""
            for m in modes:
                by_round = idx.get((w, cpus, m)) or {}
                sm = stats.summarize([s["value"] for s in by_round.values()])
                if sm is not None:
                    unit = next(iter(by_round.values()))["unit"]
                    txt = f"{_fmt(sm.median)} [{_fmt(sm.lo)}–{_fmt(sm.hi)}]"
                    if (w, cpus, m) in failed:
                        txt += " (some rounds failed)"
                    cells.append(txt)
                else:
                    cells.append(f"FAILED: {failed.get((w, cpus, m), 'no samples')}")
            for m in modes:
                if m == "off":
                    continue
                r = ratio_summary(idx, w, cpus, m)
                cells.append(f"{r.median:.2f}x [{r.lo:.2f}–{r.hi:.2f}]" if r else "n/a")
            out.append(f"| {w} | {unit} | " + " | ".join(cells) + " |")
        out.append("")
        out.append("Kernel events per 1000 user pages (pages the workload touched; for the "
                   "build, the user frames the kernel counted, or with XPFO off the page "
                   "faults), median over rounds:\n")
        out.append("| workload | mode | " + " | ".join(n for _, n in COUNTERS) + " |")
        out.append("|---|---|" + "---|" * len(COUNTERS))
        for w in workloads:
            for m in modes:
                cell = idx.get((w, cpus, m))
                if not cell or not any(user_pages(s) for s in cell.values()):
                    continue
                row = []
                for key, _ in COUNTERS:
                    vals = [stats.per_thousand(counter(s, key), user_pages(s))
                            for s in cell.values()]
                    sm = stats.summarize([v for v in vals if v is not None])
                    row.append(_fmt(sm.median) if sm else "-")
                out.append(f"| {w} | {m} | " + " | ".join(row) + " |")
        out.append("")
        out += _tlb_table(idx, workloads, modes, cpus)
        rows = []
        for w in workloads:
            for m in modes:
                samples = [x for x in (idx.get((w, cpus, m)) or {}).values()
                           if counter(x, "pgtprot_pkrs_switch")]
                if not samples:
                    continue
                cols = [_median_of(samples, f) for f in (
                    lambda x: _ratio(counter(x, "pgtprot_windows"), ops(x)),
                    lambda x: _ratio(counter(x, "pgtprot_pkrs_switch"), ops(x)),
                    lambda x: stats.per_thousand(counter(x, "pgtprot_pkrs_switch"),
                                                 counter(x, "pgfault")),
                    lambda x: _ratio(counter(x, "pgtprot_pkrs_switch"),
                                     counter(x, "pgtprot_windows")))]
                rows.append(f"| {w} | {m} | " + " | ".join(cols) + " |")
        if rows:
            out.append("pgtprot, median over rounds: per operation (a fork with its "
                       "child's exit, or a munmap), per 1000 page faults, and PKRS "
                       "switches per window (2 when each window opens and closes once):\n")
            out.append("| workload | mode | windows per op | PKRS switches per op | "
                       "PKRS switches per 1000 faults | PKRS switches per window |")
            out.append("|---|---|---|---|---|---|")
            out += rows
            out.append("")
    if getattr(data, "windows", None):
        out.append("### Deferred-flush window\n")
        out.append("Per flush a CPU took for another CPU's request: time from the oldest "
                   "request it covered to the flush, over all workloads of all rounds. "
                   "Log2 buckets: a figure is the bucket's upper bound.\n")
        out.append("| mode | vCPUs | flushes | median | p99 | max |")
        out.append("|---|---|---|---|---|---|")
        for (mode, cpus) in sorted({(w["mode"], w["cpus"]) for w in data.windows}):
            buckets: Dict[int, int] = defaultdict(int)
            mx = 0
            for w in data.windows:
                if (w["mode"], w["cpus"]) == (mode, cpus):
                    for b, c in w.get("buckets", {}).items():
                        buckets[int(b)] += c
                    mx = max(mx, w.get("max_ns", 0))
            p50 = stats.log2_percentile(buckets, 0.5)
            p99 = stats.log2_percentile(buckets, 0.99)
            out.append(f"| {mode} | {cpus} | {sum(buckets.values())} | "
                       f"{_ns(p50)} | {_ns(p99)} | {_ns(mx)} |")
        out.append("")
    retries = meta.get("retries") or []
    if retries:
        out.append("Boots retried (the guest died before its runner started; booted "
                   "again once, and the second boot's figures are the cells'):\n")
        for r in retries:
            out.append(f"- {modes_.label(r['mode'])}, {r['cpus']} vCPUs, round {r['round'] + 1}: "
                       f"{r['reason']} (log {r['log']}; retry {r.get('retry_outcome', '?')}, "
                       f"log {r.get('retry_log', '?')})")
        out.append("")
    if failures:
        out.append("Failed cells (not averaged into anything):\n")
        for f in failures:
            out.append(f"- {f['workload']}, {modes_.label(f['mode'])}, {f['cpus']} vCPUs, round "
                       f"{f['round'] + 1}: {f['reason']}")
        out.append("")
    return "\n".join(out)


def check_table(data) -> str:
    """Pages populated against the faults counted, per checked cell."""
    rows: Dict[Tuple[str, int, str], List[dict]] = defaultdict(list)
    order: List[Tuple[str, int, str]] = []
    for s in data.samples:
        if isinstance(s.get("check"), dict):
            key = (s["workload"], s["cpus"], s["mode"])
            if key not in rows:
                order.append(key)
            rows[key].append(s)
    if not rows:
        return ""
    out = ["| workload | vCPUs | mode | policy | pages | page faults | THP faults | KiB paged in |",
           "|---|---|---|---|---|---|---|---|"]
    first: Dict[str, int] = {}
    for w, _, _ in order:
        first.setdefault(w, len(first))
    modes = list(data.meta.get("modes", []))
    for key in sorted(order, key=lambda k: (first[k[0]], k[1],
                                            modes.index(k[2]) if k[2] in modes else 99)):
        cells = rows[key]
        meds = []
        for field in ("pages", "pgfault", "thp_fault_alloc", "pgpgin_kb"):
            sm = stats.summarize([c["check"][field] for c in cells if field in c["check"]])
            meds.append(f"{sm.median:,.0f}" if sm else "-")
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {cells[0].get('huge', '?')} | "
                   + " | ".join(meds) + " |")
    return "\n".join(out) + "\n"


def plots(data, outdir: Path) -> List[Path]:
    """overhead.png: ratio to off vs vCPUs; ipis.png: flush IPIs per 1000 pages."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idx = _index(data.samples)
    modes = [m for m in data.meta.get("modes", []) if m != "off"]
    cpus_list = list(data.meta.get("cpus", []))
    workloads = sorted({s["workload"] for s in data.samples})
    written: List[Path] = []
    if modes and workloads:
        cols = 3
        rows = (len(workloads) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
        for ax, w in zip(axes.flat, workloads):
            for m in modes:
                xs, ys = [], []
                for c in cpus_list:
                    r = ratio_summary(idx, w, c, m)
                    if r:
                        xs.append(c)
                        ys.append(r.median)
                if xs:
                    ax.plot(xs, ys, marker="o", label=modes_.label(m))
            ax.axhline(1.0, color="grey", linewidth=0.8)
            ax.set_title(w)
            ax.set_xlabel("vCPUs (* oversubscribed)" if oversubscribed(data.meta) else "vCPUs")
            ax.set_ylabel("overhead vs off")
            ax.set_xticks(cpus_list)
            ax.set_xticklabels([f"{c}*" if c in oversubscribed(data.meta) else str(c)
                                for c in cpus_list])
            ax.legend(fontsize=7)
        for ax in list(axes.flat)[len(workloads):]:
            ax.axis("off")
        fig.tight_layout()
        p = outdir / "overhead.png"
        fig.savefig(p, dpi=90)
        plt.close(fig)
        written.append(p)
    ipi_cpus = max(judged_cpus(data.meta) or cpus_list or [1])
    fig, ax = plt.subplots(figsize=(7, 4))
    all_modes = list(data.meta.get("modes", []))
    width = 0.8 / max(len(all_modes), 1)
    paged = [w for w in workloads
             if any(user_pages(s) for s in data.samples if s["workload"] == w)]
    for i, m in enumerate(all_modes):
        ys = []
        for w in paged:
            vals = [stats.per_thousand(s["counters"].get("xpfo_flush_ipi_sent", 0), user_pages(s))
                    for s in data.samples if s["workload"] == w and s["mode"] == m
                    and s["cpus"] == ipi_cpus]
            sm = stats.summarize([v for v in vals if v is not None])
            ys.append(sm.median if sm else 0)
        ax.bar([j + i * width for j in range(len(paged))], ys, width, label=modes_.label(m))
    ax.set_xticks([j + width * (len(all_modes) - 1) / 2 for j in range(len(paged))])
    ax.set_xticklabels(paged)
    ax.set_ylabel(f"flush IPIs sent per 1000 user pages ({ipi_cpus} vCPUs)")
    ax.legend()
    fig.tight_layout()
    p = outdir / "ipis.png"
    fig.savefig(p, dpi=90)
    plt.close(fig)
    written.append(p)
    return written


def _ipis_per_1k(idx, workload: str, cpus: int, mode: str,
                 keys: Tuple[str, ...] = ("xpfo_flush_ipi_sent",)) -> Optional[float]:
    """The median over rounds of the counters in keys, summed, per 1000
    user pages."""
    cell = idx.get((workload, cpus, mode), {})
    sm = stats.summarize([v for v in (stats.per_thousand(
        sum(s["counters"].get(k, 0) for k in keys), user_pages(s))
        for s in cell.values()) if v is not None])
    return sm.median if sm else None


# every flush another CPU takes for XPFO: by IPI, or asked of it while it
# ran user code or idled (it flushes as it is busy again)
REMOTE_FLUSHES = ("xpfo_flush_ipi_sent", "xpfo_quiet_request")


def _value(idx, workload: str, cpus: int, mode: str) -> Optional[float]:
    sm = stats.summarize([s["value"] for s in idx.get((workload, cpus, mode), {}).values()])
    return sm.median if sm else None


def _zeroed_targets(data, idx, cpus_list, ratio, row) -> None:
    """Strict at or below off: frames cleared when freed, flushes asked of
    quiet CPUs. The counts hold at every vCPU count under --icount (one
    host thread runs every vCPU), oversubscribed or not."""
    counts = ", ".join(str(c) for c in cpus_list)
    rs = {c: ratio("page_fault", c, "strict") for c in cpus_list}
    if any(r is not None for r in rs.values()):
        row(f"page_fault, strict: <= 1.00x of off (at {counts} vCPUs)",
            all(r is not None and r <= 1.00 for r in rs.values()),
            ", ".join(f"{r:.3f}x at {c}" if r is not None else f"failed at {c}"
                      for c, r in rs.items()))
    # the same after a second of idle time, which strict's idle thread
    # spends clearing the frames the untimed pass freed: judged apart
    rs = {c: ratio("page_fault_idle", c, "strict") for c in cpus_list}
    if any(r is not None for r in rs.values()):
        row(f"page_fault_idle (after one second idle), strict: <= 1.00x of off "
            f"(at {counts} vCPUs)",
            all(r is not None and r <= 1.00 for r in rs.values()),
            ", ".join(f"{r:.3f}x at {c}" if r is not None else f"failed at {c}"
                      for c, r in rs.items()))
    for c in cpus_list:
        # the page faults alone: mmap's map and touch, without its unmap
        r = ratio("mmap", c, "strict")
        if r is not None:
            row(f"page faults alone (mmap's map and touch), strict, {c} vCPUs: "
                "<= 1.00x of off", r <= 1.00, f"{r:.3f}x")
    for c in cpus_list:
        # mmap reports the map and touch, munmap the unmap of the same range
        v = [_value(idx, w, c, m) for m in ("off", "strict") for w in ("mmap", "munmap")]
        if all(x is not None for x in v):
            o1, o2, s1, s2 = (float(x or 0) for x in v)
            r = (s1 + s2) / (o1 + o2)
            row(f"page faults plus munmap of the same range (mmap + munmap), strict, "
                f"{c} vCPUs: <= 1.02x of off", r <= 1.02, f"{r:.3f}x")
    for c in cpus_list:
        both, st, pg = (ratio("page_fault", c, m)
                        for m in ("strict+pgt-batched", "strict", "pgt-batched"))
        if both is not None and st is not None and pg is not None:
            row(f"page_fault, strict+pgt-batched, {c} vCPUs: overhead <= strict's plus "
                "pgt-batched's", both - 1 <= (st - 1) + (pg - 1),
                f"{both:.3f}x against {st:.3f}x + {pg:.3f}x")
    if not data.meta.get("icount"):
        return
    every = sorted(set(data.meta.get("cpus", [])))
    if 2 in every and max(every) > 2:
        hi = max(every)
        for w in ("page_fault", "page_fault_warm", "page_fault_idle", "fork", "exec", "mmap"):
            two, top = (_ipis_per_1k(idx, w, c, "strict") for c in (2, hi))
            if two is not None and top is not None:
                row(f"{w}, strict: flush IPIs per 1000 user pages at {hi} vCPUs <= at 2",
                    top <= two, f"{two:.2f} at 2, {top:.2f} at {hi}")
            two, top = (_ipis_per_1k(idx, w, c, "strict", REMOTE_FLUSHES) for c in (2, hi))
            if two is not None and top is not None:
                row(f"{w}, strict: remote flushes (IPIs and quiet requests) per 1000 user "
                    f"pages at {hi} vCPUs <= at 2", top <= two,
                    f"{two:.2f} at 2, {top:.2f} at {hi}")
        for w in ("page_fault", "fork", "exec"):
            r = ratio(w, hi, "strict")
            if r is not None:
                row(f"{w}, strict, {hi} vCPUs (instructions): <= 1.05x of off", r <= 1.05,
                    f"{r:.3f}x")


def targets(data) -> str:
    """The flush-strategy targets, measured: met or missed, with the figure."""
    idx = _index(data.samples)
    cpus_list = judged_cpus(data.meta)
    if not cpus_list:
        return ""
    hi, lo = max(cpus_list), min(cpus_list)
    rows = []

    def ratio(w: str, c: int, m: str) -> Optional[float]:
        r = ratio_summary(idx, w, c, m)
        return r.median if r else None

    def row(what: str, ok: Optional[bool], figure: str) -> None:
        verdict = "n/a" if ok is None else ("met" if ok else "MISSED")
        rows.append(f"| {what} | {figure} | {verdict} |")

    s_ipi, b_ipi = (_ipis_per_1k(idx, "build_sys", hi, "sync"),
                    _ipis_per_1k(idx, "build_sys", hi, "batched"))
    if s_ipi is not None and b_ipi is not None:
        factor = s_ipi / b_ipi if b_ipi else float("inf")
        row(f"flush IPIs per 1000 user pages, build, {hi} vCPUs: batched at least 20x fewer "
            "than sync", factor >= 20,
            f"sync {s_ipi:.1f}, batched {b_ipi:.2f}: {factor:.0f}x fewer")
    s, d, b = (ratio("build_sys", hi, m) for m in ("sync", "deferred", "batched"))
    if s is not None and d is not None and b is not None:
        row(f"build system time, {hi} vCPUs: sync > deferred > batched", s > d > b,
            f"sync {s:.2f}x, deferred {d:.2f}x, batched {b:.2f}x")
        row(f"build system time, {hi} vCPUs: batched <= 1.15x of off", b <= 1.15, f"{b:.2f}x")
    b_lo = ratio("build_sys", lo, "batched")
    if b is not None and b_lo is not None:
        row(f"batched overhead does not grow: ratio at {hi} vCPUs within 5 points of {lo}",
            abs(b - b_lo) <= 0.05, f"{b_lo:.2f}x at {lo}, {b:.2f}x at {hi}")
    counts = ", ".join(str(c) for c in cpus_list)
    for w in ("page_fault", "fork", "read"):
        rs = {c: ratio(w, c, "batched") for c in cpus_list}
        if any(r is not None for r in rs.values()):
            ok = all(r is not None and r <= 1.15 for r in rs.values())
            row(f"{w}, batched: <= 1.15x of off (at {counts} vCPUs)", ok,
                ", ".join(f"{r:.2f}x at {c}" if r is not None else f"failed at {c}"
                          for c, r in rs.items()))
    # the strict mode's targets (2026-11-21): at batched's cost or less
    st_ipi = _ipis_per_1k(idx, "build_sys", hi, "strict")
    if st_ipi is not None:
        row(f"strict: flush IPIs per 1000 user pages, build, {hi} vCPUs: <= 5",
            st_ipi <= 5, f"{st_ipi:.1f}")
    for c in cpus_list:
        st, bt = ratio("build_sys", c, "strict"), ratio("build_sys", c, "batched")
        if st is not None and bt is not None:
            row(f"strict: build system time, {c} vCPUs: <= 1.15x of off and <= batched's",
                st <= 1.15 and st <= bt, f"strict {st:.2f}x, batched {bt:.2f}x")
        elif st is not None:
            # without batched in the run, judge only what ran
            row(f"strict: build system time, {c} vCPUs: <= 1.15x of off", st <= 1.15,
                f"{st:.2f}x")
    for w in ("page_fault", "page_fault_thp", "fork", "mmap", "read", "write"):
        pairs = {c: (ratio(w, c, "strict"), ratio(w, c, "batched")) for c in cpus_list}
        # a run without batched (or without strict) has nothing to compare
        if (any(st is not None for st, _ in pairs.values())
                and any(bt is not None for _, bt in pairs.values())):
            ok = all(st is not None and bt is not None and st <= bt
                     for st, bt in pairs.values())
            row(f"{w}, strict: <= batched's ratio (at {counts} vCPUs)", ok,
                ", ".join(f"strict {st:.2f}x, batched {bt:.2f}x at {c}"
                          if st is not None and bt is not None else f"n/a at {c}"
                          for c, (st, bt) in pairs.items()))
    # the strict mode's per-page cost (4K faults, page-cache reads), judged since 2026-11-24
    for w in ("page_fault", "read"):
        rs = {c: ratio(w, c, "strict") for c in cpus_list}
        if any(r is not None for r in rs.values()):
            ok = all(r is not None and r <= 1.15 for r in rs.values())
            row(f"{w}, strict: <= 1.15x of off (at {counts} vCPUs)", ok,
                ", ".join(f"{r:.2f}x at {c}" if r is not None else f"failed at {c}"
                          for c, r in rs.items()))
    _zeroed_targets(data, idx, cpus_list, ratio, row)
    vs = {c: ratio("build_sys", c, "vanilla") for c in cpus_list}
    if any(v is not None for v in vs.values()):
        row("xpfo=off costs nothing: build system time, vanilla vs off", None,
            ", ".join(f"vanilla/off = {v:.2f}x at {c}" for c, v in vs.items()
                      if v is not None))
    if not rows:
        return ""
    return "\n".join(["| target | measured (median of per-round ratios to off) | |",
                      "|---|---|---|"] + rows) + "\n"
