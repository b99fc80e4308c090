"""Side-by-side benchmarks: the same kernel booted in each mode, alternating.

Every (round, vCPU count) boots each mode once, in the same order, so that
drift on the host hits every mode alike. Each workload is followed by a
snapshot of the kernel's counters, and the difference is the workload's
event count.
"""

import dataclasses
import json
import os
import platform
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from pathlib import Path

from . import buildload, console, guest, machines, modes, printer, qemu, report, source
from .errors import HarnessError
from .paths import LAYOUT, write_json

# A mode is a boot parameter of the series' kernel, except 'vanilla': the
# same configuration built without the series.
VANILLA = "vanilla"
# `./xpfo bench`'s modes by default, and every mode it takes (the pgtprot
# modes and the non-global direct map's on request)
DEFAULT_MODES = (VANILLA,) + modes.XPFO_MODES
ALL_MODES = DEFAULT_MODES + modes.PGT_RUN_MODES + modes.DMAP_RUN_MODES
# files the build workload compiles in a --quick run
QUICK_BUILD_FILES = 8
# what one boot takes, for an estimate before a run: on the 2-core QEMU TCG
# host of the README's timings, the demo's quick run (2 vCPUs) 2m51s for 8
# boots, the full one (1 and 2 vCPUs) 49m39s for 30
BOOT_ESTIMATE_S = {True: 21.0, False: 99.0}


@dataclass(frozen=True)
class Workload:
    step: str                   # guest step; {cpus} is replaced
    reports: Sequence[str]      # the workload names the step reports


BUILD_REPORTS = ("build_sys", "build_user", "build_elapsed")

# The huge-page policy of every workload, as the report and the docs state it.
# The guest's THP setting is `always`: a workload that does not choose would
# measure 2 MiB zeroing. "4K" workloads map with MADV_NOHUGEPAGE and are
# checked (page faults counted while populating >= pages); "THP" ones map a
# 2 MiB-aligned range with MADV_HUGEPAGE and are checked (THP faults >=
# pages / 512); a cell that fails its check is a failed cell.
POLICY = {
    "build_sys": "whatever the compiler gets: THP `always`, unchecked",
    "build_user": "as build_sys",
    "build_elapsed": "as build_sys",
    "page_fault": "4K: MADV_NOHUGEPAGE; checked: page faults >= pages",
    "page_fault_thp": "THP: 2 MiB-aligned, MADV_HUGEPAGE; checked: THP faults >= pages/512",
    "page_fault_warm": "as page_fault, after one untimed pass of the same processes: frames "
                       "userspace had before; checked: page faults >= pages",
    "page_fault_idle": "as page_fault_warm, with one second of sleep between the untimed pass "
                       "and the timed one; checked: page faults >= pages",
    "page_fault_idle_gap": "the second of sleep before page_fault_idle's timed part, with the "
                           "kernel's counters over it (what it did in idle time), per 1000 "
                           "pages of the untimed pass before it; unchecked",
    "page_fault_shared": "4K: tmpfs file (huge=never), MAP_SHARED, MADV_NOHUGEPAGE; "
                         "checked: page faults >= pages",
    "fork": "4K: MADV_NOHUGEPAGE; checked at set-up: page faults >= pages",
    "fork_thp": "THP: 2 MiB-aligned, MADV_HUGEPAGE; checked at set-up: THP faults >= pages/512",
    "fork_pte_thp": "THP mapped by PTEs: THPs faulted in (2 MiB-aligned, MADV_HUGEPAGE), "
                    "every PMD split by an mprotect() of one page and back, then "
                    "MADV_NOHUGEPAGE; checked at set-up: THP faults >= pages/512 and no "
                    "AnonHugePages left",
    "munmap_pte": "4K: MADV_NOHUGEPAGE; one munmap() of the whole populated range; checked "
                  "at set-up: page faults >= pages",
    "munmap_pte_thp": "THP mapped by PTEs, as fork_pte_thp; one munmap() of the whole range",
    "mmap": "4K: MADV_NOHUGEPAGE; checked: page faults >= pages",
    "munmap": "4K (the mappings of mmap)",
    "write": "tmpfs page cache (huge=never: 4K), unchecked",
    "read": "tmpfs page cache (huge=never: 4K), warm, unchecked",
    "disk_read": "ext2 page cache (4K folios), cache dropped before each read; "
                 "checked: KiB paged in >= 4 x pages",
    "exec": "no memory of its own",
    "lseek": "no memory work",
    "pread1": "one 4K tmpfs page-cache page, 1 byte per call: one kmap per call in XPFO modes",
    "pwrite1": "one 4K tmpfs page-cache page, 1-byte pwrite() per call: one kmap per call in "
               "XPFO modes",
    "ipi": "one 4K page write-protected and back per call, another thread of the process "
           "spinning in user mode on CPU 1; checked: CPU 1 took a flush IPI (none asked "
           "with one CPU)",
    "ipi_none": "as ipi, with no other thread: no CPU to interrupt",
}


def _workloads(mb: int, fork_mb: int, ipi_k: int) -> List[Workload]:
    return [
        Workload("build:{cpus}", BUILD_REPORTS),
        Workload(f"sh:xbench:page_fault:{mb}:{{cpus}}", ("page_fault",)),
        Workload(f"sh:xbench:page_fault_thp:{mb}:{{cpus}}", ("page_fault_thp",)),
        Workload(f"sh:xbench:page_fault_warm:{mb}:{{cpus}}", ("page_fault_warm",)),
        Workload(f"sh:xbench:page_fault_idle:{mb}:{{cpus}}",
                 ("page_fault_idle_gap", "page_fault_idle")),
        Workload(f"sh:xbench:page_fault_shared:{mb}:{{cpus}}", ("page_fault_shared",)),
        Workload(f"sh:xbench:fork:{fork_mb}", ("fork",)),
        Workload(f"sh:xbench:fork_thp:{fork_mb}", ("fork_thp",)),
        Workload(f"sh:xbench:fork_pte_thp:{fork_mb}", ("fork_pte_thp",)),
        Workload(f"sh:xbench:munmap_pte:{fork_mb}", ("munmap_pte",)),
        Workload(f"sh:xbench:munmap_pte_thp:{fork_mb}", ("munmap_pte_thp",)),
        Workload(f"sh:xbench:mmap:{mb}", ("mmap", "munmap")),
        Workload(f"sh:xbench:file:{mb}", ("write", "read")),
        Workload(f"sh:xbench:disk_read:{mb}", ("disk_read",)),
        Workload("sh:xbench:exec", ("exec",)),
        Workload("sh:xbench:lseek", ("lseek",)),
        Workload("sh:xbench:pread1", ("pread1",)),
        Workload("sh:xbench:pwrite1", ("pwrite1",)),
        Workload(f"sh:xbench:ipi:{ipi_k}", ("ipi_none", "ipi")),
    ]


QUICK = _workloads(8, 32, 1)
FULL = _workloads(64, 256, 10)


def select(workloads: Sequence[Workload], names: Optional[Sequence[str]]) -> List[Workload]:
    """The workloads that report any of @names (all of them without names)."""
    if not names:
        return list(workloads)
    known = {r for w in workloads for r in w.reports}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise HarnessError(f"unknown workload {unknown[0]!r}",
                           f"use any of: {', '.join(sorted(known))}")
    return [w for w in workloads if set(w.reports) & set(names)]

# vCPU counts of the default run: the seed's scaling curve, cut at the host's
# cores. More vCPUs than host cores measure the host's scheduler, not the
# kernel: such a column is run only when asked for, and marked.
CPU_STEPS = (1, 2, 4, 8)


def default_cpus(host_cpus: Optional[int] = None) -> List[int]:
    host = host_cpus or os.cpu_count() or 1
    return [c for c in CPU_STEPS if c <= host] or [1]


def oversubscribed(cpus: Sequence[int], host_cpus: object) -> List[int]:
    """The vCPU counts above the host's cores (none when they are unknown).

    host_cpus comes from run metadata: nproc's output (a string), a count
    from os.cpu_count(), or anything else a saved file held."""
    if not isinstance(host_cpus, (str, int, float)):
        return []
    try:
        host = int(host_cpus)
    except ValueError:
        return []
    return sorted({c for c in cpus if c > host})


def check(r: dict) -> Optional[str]:
    """Why a workload's result does not measure what its policy says, or None.

    4K: a page fault per page populated, and no THP faults. THP: a THP fault
    per 2 MiB. A read from disk: at least the file's size paged in. ipi: a
    flush IPI taken where another CPU runs the process."""
    chk = r.get("check")
    if not isinstance(chk, dict):
        return None
    pages = int(chk.get("pages", 0))
    faults, thp = int(chk.get("pgfault", 0)), int(chk.get("thp_fault_alloc", 0))
    huge = r.get("huge")
    if huge == "4k":
        if faults < pages:
            return (f"4K policy not held: {faults} page faults for {pages} pages "
                    f"({thp} THP faults)")
        if thp:
            return f"4K policy not held: {thp} THP faults while populating {pages} pages"
    elif huge == "thp":
        if thp < pages // 512:
            return (f"THP policy not held: {thp} THP faults for {pages} pages "
                    f"(want {pages // 512})")
    if "pgpgin_kb" in chk and int(chk["pgpgin_kb"]) * 1024 < pages * 4096:
        return (f"not read from disk: {chk['pgpgin_kb']} KiB paged in for "
                f"{pages * 4} KiB read (page cache not dropped?)")
    want = int(chk.get("remote_flushes_min", 0))
    counters = r.get("counters")
    if not isinstance(counters, dict):
        counters = {}
    got = int(counters.get("nr_tlb_remote_flush_received", 0))
    if want and got < want:
        return (f"{got} TLB flush IPIs taken in {chk.get('calls')} calls (want {want}): "
                f"the other CPU was not interrupted")
    return None


@dataclass(frozen=True)
class BenchRequest:
    modes: Sequence[str]
    cpus: Sequence[int]
    rounds: int
    workloads: Sequence[Workload]
    mem_mb: int = 2048
    timeout: float = 1200.0
    build_files: int = buildload.DEFAULT_FILES
    vanilla_kernel: Optional[Path] = None
    tcg_threads: str = "multi"      # see qemu.Machine
    icount: bool = False            # timings are guest instruction counts
    machine: str = machines.DEFAULT  # the machine kind (machines.py)


@dataclass
class BenchData:
    samples: List[dict] = field(default_factory=list)
    failures: List[dict] = field(default_factory=list)
    windows: List[dict] = field(default_factory=list)   # deferred-flush windows
    meta: Dict[str, object] = field(default_factory=dict)


def _counters(con, label: str) -> Optional[Dict[str, int]]:
    st = con.steps.get(f"vmstat:{label}")
    if st is None or not st.results:
        return None
    return st.results[0].get("counters")


def _delta(after: Dict[str, int], before: Dict[str, int]) -> Dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


DEFERRED_MODES = ("deferred", "batched")


def steps_for(req: BenchRequest, cpus: int, mode: str = "") -> List[str]:
    window = mode != VANILLA and bool(mode) and modes.xpfo(mode) in DEFERRED_MODES
    steps = (["window:reset"] if window else [])
    if any(":disk_read" in wl.step for wl in req.workloads):
        steps.append("disk")    # ext2 on the scratch disk, at /mnt/scratch
    steps.append("vmstat:start")
    for i, wl in enumerate(req.workloads):
        steps += [wl.step.format(cpus=cpus), f"vmstat:{i}"]
    return steps + (["window"] if window else [])


def _boot_incident(con) -> Optional[str]:
    """The first kernel problem report anywhere in the boot, as a reason."""
    if not con.incidents:
        return None
    inc = con.incidents[0]
    where = f"in {inc.step}" if inc.step else "outside any step"
    more = f" (+{len(con.incidents) - 1} more)" if len(con.incidents) > 1 else ""
    return f"{inc.kind} {where}: {inc.first_line}{more}"


def collect(run: qemu.Run, req: BenchRequest, mode: str, cpus: int, rnd: int,
            data: BenchData) -> None:
    """Turn one guest run into samples; anything missing becomes a failure.

    A kernel problem report (oops, BUG, WARNING, ...) anywhere in the boot,
    at boot or in any step, fails every cell of that boot: a kernel that
    warned is not one to take figures from."""
    con = run.console
    win = con.steps.get("window")
    if win is not None and win.results and win.results[0].get("window"):
        data.windows.append({"mode": mode, "cpus": cpus, "round": rnd,
                             **win.results[0]["window"]})
    boot_reason = _boot_incident(con)
    prev = _counters(con, "start")
    for i, wl in enumerate(req.workloads):
        step_name = wl.step.format(cpus=cpus)
        st = con.steps.get(step_name)
        after = _counters(con, str(i))
        delta = _delta(after, prev) if after is not None and prev is not None else {}
        prev = after
        results = {r.get("workload"): r for r in (st.results if st else [])}
        for name in wl.reports:
            cell = {"mode": mode, "cpus": cpus, "round": rnd, "workload": name}
            r = results.get(name)
            reason = None
            if boot_reason:
                reason = boot_reason
            elif r is None:
                reason = (f"guest {run.outcome.value}" if run.outcome is not
                          qemu.Outcome.POWERED_OFF else "no result")
            elif st is not None and st.exit_status not in (0, None):
                reason = f"exit status {st.exit_status}"
            else:
                reason = check(r)
            if reason or r is None:     # r is None always has a reason
                data.failures.append({**cell, "reason": reason, "log": str(run.log)})
                continue
            # The workload's own counters cover its timed part only (fork's
            # set-up is outside); older guests only had the step's.
            counters = r["counters"] if isinstance(r.get("counters"), dict) else delta
            sample = {**cell, "value": r["value"], "unit": r["unit"],
                      "better": r["better"], "seconds": r["seconds"],
                      "user_pages": r.get("user_pages", 0),
                      "counters": counters, "step": step_name}
            for key in ("huge", "check"):
                if key in r:
                    sample[key] = r[key]
            data.samples.append(sample)


# The runner's step marker, with or without the KTAP comment prefix.
_STEP_BEGIN = re.compile(r"^(?:# )?XH-STEP-BEGIN ")


def runner_started(con) -> bool:
    return any(_STEP_BEGIN.match(line) for line in con.lines)


def needs_retry(run: qemu.Run) -> bool:
    """A guest that died before its runner started (a crash at boot: not a
    figure of any workload) is booted again, once."""
    return (run.outcome in (qemu.Outcome.CRASHED, qemu.Outcome.TIMEOUT)
            and not runner_started(run.console))


def boot(greq: guest.GuestRequest, cell: Dict[str, object],
         runner: Callable[[guest.GuestRequest], qemu.Run] = guest.run,
         ) -> Tuple[qemu.Run, Optional[dict]]:
    """Run one benchmark boot, again once when it died before its runner;
    the retry, when there was one, is described for the report."""
    r = runner(greq)
    if not needs_retry(r):
        return r, None
    why = _boot_incident(r.console) or f"guest {r.outcome.value} before its runner started"
    printer.warn(f"{greq.label}: {why}; booting it again, once")
    again = runner(dataclasses.replace(greq, label=greq.label + "-retry"))
    return again, {**cell, "reason": why, "log": str(r.log), "retry_log": str(again.log),
                   "retry_outcome": again.outcome.value}


def guest_request(req: BenchRequest, mode: str, cpus: int, rnd: int,
                  kernel: Optional[Path] = None, disks: Sequence[Path] = (),
                  ) -> guest.GuestRequest:
    """The boot of one (round, vCPU count, mode) cell. kernel: the series'
    image (default: the one built in build/); disks: beside the scratch disk."""
    vanilla = mode == VANILLA
    return guest.GuestRequest(steps=steps_for(req, cpus, mode), cpus=cpus,
                              mem_mb=req.mem_mb,
                              params=[] if vanilla else modes.params(mode),
                              timeout=req.timeout,
                              disk=machines.get(req.machine).has_disk,
                              extra_disks=disks, machine=req.machine,
                              kernel=req.vanilla_kernel if vanilla else kernel,
                              tcg_threads=req.tcg_threads, icount=req.icount,
                              label=f"bench-{mode}-{cpus}cpu-r{rnd}")


def host_meta() -> Dict[str, object]:
    def out(cmd: List[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
        except OSError:
            return "unknown"

    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    qemu_version = out([qemu.QEMU, "--version"])
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "qemu": qemu_version.splitlines()[0] if qemu_version else "unknown",
        "host_cpu": cpu,
        "host_cpus": out(["nproc"]),
        "host": platform.node(),
    }


def run(req: BenchRequest, meta: Dict[str, object], kernel: Optional[Path] = None,
        ) -> BenchData:
    """kernel: the series' image to boot (default: the one built in build/)."""
    data = BenchData(meta={**meta, **host_meta(), "modes": list(req.modes),
                           "cpus": list(req.cpus), "rounds": req.rounds,
                           "workloads": [w.step for w in req.workloads],
                           "icount": req.icount,
                           "policy": {n: POLICY.get(n, "") for w in req.workloads
                                      for n in w.reports}})
    over = oversubscribed(req.cpus, data.meta.get("host_cpus"))
    retries: List[dict] = []
    data.meta["oversubscribed"] = over
    data.meta["retries"] = retries
    for c in over:
        printer.warn(f"{c} vCPUs on {data.meta.get('host_cpus')} host cores: oversubscribed, "
                     "reported but not judged")
    total = req.rounds * len(req.cpus) * len(req.modes)
    kind = machines.get(req.machine)
    disks = []
    if kind.has_disk and any(w.step.startswith("build") for w in req.workloads):
        disks.append(buildload.image(nfiles=req.build_files))
    done = 0
    start = time.monotonic()
    for rnd in range(req.rounds):
        for cpus in req.cpus:
            for mode in req.modes:
                elapsed = time.monotonic() - start
                eta = (elapsed / done * (total - done)) if done else 0
                printer.info("bench", f"round {rnd + 1}/{req.rounds}, {cpus} vCPUs, "
                             f"{mode} ({done}/{total} boots, "
                             f"{printer.fmt_elapsed(elapsed)} elapsed"
                             + (f", ~{printer.fmt_elapsed(eta)} left)" if done else ")"))
                greq = guest_request(req, mode, cpus, rnd, kernel, disks)
                r, retry = boot(greq, {"mode": mode, "cpus": cpus, "round": rnd})
                if retry:
                    retries.append(retry)
                collect(r, req, mode, cpus, rnd, data)
                done += 1
    data.meta["elapsed_s"] = round(time.monotonic() - start, 1)
    return data


_LABEL = re.compile(r"bench-(?P<mode>[a-z+-]+?)-(?P<cpus>\d+)cpu-r(?P<round>\d+)"
                    r"(?P<retry>-retry)?\.log$")


def _parse_log(log: Path) -> qemu.Run:
    con = console.parse(log.read_text(errors="replace").splitlines())
    finished = getattr(con, "runner_finished", None)
    done = finished() if callable(finished) else con.done
    outcome = qemu.Outcome.POWERED_OFF if done else qemu.Outcome.CRASHED
    return qemu.Run(qemu.Machine(kernel=Path("?"), initrd=Path("?")), outcome, 0.0, con, log)


def from_logs(logs: Sequence[Path], req: BenchRequest, meta: Dict[str, object]) -> BenchData:
    """Rebuild the samples of a run from its saved guest logs (offline).

    A boot that was retried has two logs, the second ending in -retry: the
    retry's figures count and the first is listed as a retry."""
    data = BenchData(meta=dict(meta))
    boots: Dict[Tuple[str, int, int], Dict[bool, Path]] = {}
    for log in sorted(logs):
        m = _LABEL.search(log.name)
        if not m:
            continue
        # logs of runs before the rename name batched "batch"
        key = (modes.canonical(m.group("mode")), int(m.group("cpus")), int(m.group("round")))
        boots.setdefault(key, {})[bool(m.group("retry"))] = log
    retries = []
    for (mode, cpus, rnd), pair in sorted(boots.items(), key=lambda kv: (kv[0][2], kv[0][1],
                                                                          kv[0][0])):
        if True in pair and False in pair:
            first, again = _parse_log(pair[False]), _parse_log(pair[True])
            why = (_boot_incident(first.console)
                   or f"guest {first.outcome.value} before its runner started")
            retries.append({"mode": mode, "cpus": cpus, "round": rnd, "reason": why,
                            "log": str(pair[False]), "retry_log": str(pair[True]),
                            "retry_outcome": again.outcome.value})
            run = again
        else:
            run = _parse_log(pair.get(True) or pair[False])
        collect(run, req, mode, cpus, rnd, data)
    seen = list(boots)
    data.meta["modes"] = [modes.canonical(m) for m in req.modes
                          if any(s[0] == modes.canonical(m) for s in seen)]
    cpus_seen = sorted({s[1] for s in seen})
    data.meta["cpus"] = cpus_seen
    data.meta["rounds"] = len({s[2] for s in seen})
    data.meta["logs"] = sum(len(p) for p in boots.values())
    data.meta["retries"] = retries
    data.meta["oversubscribed"] = oversubscribed(
        cpus_seen, meta.get("host_cpus") or os.cpu_count())
    data.meta.setdefault("policy", {n: POLICY.get(n, "") for w in req.workloads
                                    for n in w.reports})
    return data


def estimate(n_modes: int, cpus: Sequence[int], rounds: int, quick: bool) -> float:
    """Seconds a run of that size is expected to take (before the first
    boot; once one is done, run() prints its own "~Xm left")."""
    return n_modes * len(cpus) * rounds * BOOT_ESTIMATE_S[quick]


def command_line(modes: Sequence[str], cpus: Sequence[int], rounds: int, quick: bool,
                 workloads: Optional[Sequence[str]] = None, kernel: Optional[str] = None,
                 icount: bool = False, machine: str = machines.DEFAULT) -> str:
    """The ./xpfo bench command that makes a run: the report's first line."""
    parts = ["./xpfo bench", "--modes", *modes, "--cpus", *map(str, cpus),
             "--rounds", str(rounds)]
    if quick:
        parts.append("--quick")
    if workloads:
        parts += ["--workloads", *workloads]
    if kernel:
        parts += ["--kernel", kernel]
    if icount:
        parts.append("--icount")
    if machine != machines.DEFAULT:
        parts += ["--machine", machine]
    return " ".join(parts)


def default_cpus_on(machine: str) -> List[int]:
    """The vCPU counts of a run that names none: the machine kind's fixed
    count, or default_cpus()."""
    fixed = machines.get(machine).cpus
    return [fixed] if fixed else default_cpus()


def check_machine(machine: str, modes: Sequence[str], cpus: Sequence[int], quick: bool,
                  workloads: Optional[Sequence[str]] = None, icount: bool = False) -> None:
    """Refuse what the machine kind cannot run, before anything boots."""
    kind = machines.get(machine)
    if kind.emulator == machines.QEMU:
        return
    if icount:
        raise HarnessError(f"--icount is QEMU's; machine {kind.name} is {kind.emulator}",
                           "leave --icount out: Bochs's clock already runs at its `ips` "
                           "guest instructions per second")
    if VANILLA in modes:
        raise HarnessError(f"the vanilla kernel is benchmarked on QEMU machines only, "
                           f"not on {kind.name}")
    if kind.cpus is not None and list(cpus) != [kind.cpus]:
        raise HarnessError(f"machine {kind.name} has {kind.cpus} CPU"
                           f"{'s' if kind.cpus > 1 else ''}, not "
                           f"{' '.join(map(str, cpus))}",
                           f"give --cpus {kind.cpus}, or leave --cpus out")
    wls = select(QUICK if quick else FULL, workloads)
    bad = sorted({n for w in wls if w.step.startswith("build") or ":disk_read" in w.step
                  for n in w.reports})
    if bad:
        raise HarnessError(f"machine {kind.name} has no disk (no virtio), and workload"
                           f"{'s' if len(bad) > 1 else ''} {', '.join(bad)} need"
                           f"{'' if len(bad) > 1 else 's'} one",
                           "choose others with --workloads (e.g. page_fault fork exec lseek)")


def write_report(data: BenchData, outdir: Path, command: str) -> None:
    """results.json, results.md and the plots in `outdir`, replaced whole;
    the tables on the terminal."""
    tmp = outdir.with_name(outdir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_json(tmp / "results.json", {"meta": data.meta, "samples": data.samples,
                                      "failures": data.failures, "windows": data.windows})
    text = report.tables(data)
    (tmp / "results.md").write_text(f"Command: `{command}`\n\n{text}\n")
    report.plots(data, tmp)
    shutil.rmtree(outdir, ignore_errors=True)
    tmp.rename(outdir)
    printer.raw(text)
    printer.info("bench", f"results, tables and plots in {outdir}")


def run_and_report(modes: Sequence[str], cpus: Sequence[int], rounds: int, quick: bool,
                   outdir: Path, command: str, vanilla: Optional[Path] = None,
                   tcg_threads: str = "multi", kernel: Optional[Path] = None,
                   workloads: Optional[Sequence[str]] = None,
                   icount: bool = False, machine: str = machines.DEFAULT) -> BenchData:
    """`./xpfo bench`: run the benchmark and write its report to `outdir`.
    `vanilla`: the image of the 'vanilla' mode; `kernel`: the series' image
    (default: the one built in build/)."""
    req = BenchRequest(modes=modes, cpus=cpus, rounds=rounds, icount=icount, machine=machine,
                       workloads=select(QUICK if quick else FULL, workloads),
                       build_files=QUICK_BUILD_FILES if quick else buildload.DEFAULT_FILES,
                       vanilla_kernel=vanilla, tcg_threads=tcg_threads)
    data = run(req, meta={"command": command, "series_commit": source.head_commit(),
                          "kernel": "6.12 + kernel/patches", "quick": quick,
                          "machine": machine,
                          "kernel_image": str(kernel or LAYOUT.bzimage)},
               kernel=kernel)
    write_report(data, outdir, command)
    return data


def rebuild(logs: Sequence[str], outdir: Path, cpus: Sequence[int], rounds: int,
            quick: bool, workloads: Optional[Sequence[str]], command: str) -> BenchData:
    """`./xpfo bench --from-logs`: the report rebuilt from saved guest logs,
    with the run's own description (host, QEMU, series, date) when the
    report in `outdir` is that run's."""
    # every mode the logs hold, pgtprot's included
    req = BenchRequest(modes=ALL_MODES, cpus=cpus, rounds=rounds,
                       workloads=select(QUICK if quick else FULL, workloads))
    paths = [Path(p) for p in logs]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise HarnessError(f"no such log: {missing[0]}")
    meta: Dict[str, object] = {}
    try:
        meta = json.loads((outdir / "results.json").read_text())["meta"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    meta.update({"command": command, "from_logs": True})
    data = from_logs(paths, req, meta)
    write_report(data, outdir, f"{command}`; report rebuilt from its {len(paths)} guest "
                 f"logs with `./xpfo bench {'--quick ' if quick else ''}--from-logs LOG...")
    return data
