"""Side-by-side benchmarks: the same kernel booted in each mode, alternating.

Every (round, vCPU count) boots each mode once, in the same order, so that
drift on the host hits every mode alike. Each workload is followed by a
snapshot of the kernel's counters, and the difference is the workload's
event count.
"""

import platform
import re
import subprocess
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from pathlib import Path

from . import buildload, console, guest, printer, qemu

# A mode is a boot parameter of the series' kernel, except 'vanilla': the
# same configuration built without the series.
VANILLA = "vanilla"


@dataclass(frozen=True)
class Workload:
    step: str                   # guest step; {cpus} is replaced
    reports: Sequence[str]      # the workload names the step reports


BUILD_REPORTS = ("build_sys", "build_user", "build_elapsed")

QUICK = [
    Workload("build:{cpus}", BUILD_REPORTS),
    Workload("sh:xbench:page_fault:8:{cpus}", ("page_fault",)),
    Workload("sh:xbench:fork:32", ("fork",)),
    Workload("sh:xbench:mmap:8", ("mmap", "munmap")),
    Workload("sh:xbench:file:8", ("write", "read")),
    Workload("sh:xbench:exec", ("exec",)),
    Workload("sh:xbench:lseek", ("lseek",)),
]
FULL = [
    Workload("build:{cpus}", BUILD_REPORTS),
    Workload("sh:xbench:page_fault:64:{cpus}", ("page_fault",)),
    Workload("sh:xbench:fork:256", ("fork",)),
    Workload("sh:xbench:mmap:64", ("mmap", "munmap")),
    Workload("sh:xbench:file:64", ("write", "read")),
    Workload("sh:xbench:exec", ("exec",)),
    Workload("sh:xbench:lseek", ("lseek",)),
]


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


DEFERRED_MODES = ("deferred", "batch")


def steps_for(req: BenchRequest, cpus: int, mode: str = "") -> List[str]:
    window = mode in DEFERRED_MODES
    steps = (["window:reset"] if window else []) + ["vmstat:start"]
    for i, wl in enumerate(req.workloads):
        steps += [wl.step.format(cpus=cpus), f"vmstat:{i}"]
    return steps + (["window"] if window else [])


def collect(run: qemu.Run, req: BenchRequest, mode: str, cpus: int, rnd: int,
            data: BenchData) -> None:
    """Turn one guest run into samples; anything missing becomes a failure."""
    con = run.console
    win = con.steps.get("window")
    if win is not None and win.results and win.results[0].get("window"):
        data.windows.append({"mode": mode, "cpus": cpus, "round": rnd,
                             **win.results[0]["window"]})
    prev = _counters(con, "start")
    for i, wl in enumerate(req.workloads):
        step_name = wl.step.format(cpus=cpus)
        st = con.steps.get(step_name)
        after = _counters(con, str(i))
        delta = _delta(after, prev) if after is not None and prev is not None else {}
        prev = after
        results = {r.get("workload"): r for r in (st.results if st else [])}
        incidents = con.incidents_in(step_name)
        for name in wl.reports:
            cell = {"mode": mode, "cpus": cpus, "round": rnd, "workload": name}
            r = results.get(name)
            reason = None
            if incidents:
                reason = f"{incidents[0].kind}: {incidents[0].first_line}"
            elif r is None:
                reason = (f"guest {run.outcome.value}" if run.outcome is not
                          qemu.Outcome.POWERED_OFF else "no result")
                # a crash outside any workload (at boot, say): name it
                early = con.incidents_in(None)
                if early and run.outcome is not qemu.Outcome.POWERED_OFF:
                    reason += f" ({early[0].kind} outside any step: {early[0].first_line})"
            elif st is not None and st.exit_status not in (0, None):
                reason = f"exit status {st.exit_status}"
            if reason:
                data.failures.append({**cell, "reason": reason, "log": str(run.log)})
                continue
            data.samples.append({**cell, "value": r["value"], "unit": r["unit"],
                                 "better": r["better"], "seconds": r["seconds"],
                                 "user_pages": r.get("user_pages", 0),
                                 "counters": delta, "step": step_name})


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
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "qemu": out([qemu.QEMU, "--version"]).splitlines()[0] if out([qemu.QEMU, "--version"]) else "unknown",
        "host_cpu": cpu,
        "host_cpus": out(["nproc"]),
        "host": platform.node(),
    }


def run(req: BenchRequest, meta: Dict[str, object]) -> BenchData:
    data = BenchData(meta={**meta, **host_meta(), "modes": list(req.modes),
                           "cpus": list(req.cpus), "rounds": req.rounds,
                           "workloads": [w.step for w in req.workloads]})
    total = req.rounds * len(req.cpus) * len(req.modes)
    disks = []
    if any(w.step.startswith("build") for w in req.workloads):
        disks.append(buildload.image(nfiles=req.build_files))
    done = 0
    start = time.monotonic()
    for rnd in range(req.rounds):
        for cpus in req.cpus:
            for mode in req.modes:
                elapsed = time.monotonic() - start
                eta = (elapsed / done * (total - done)) if done else 0
                printer.info("bench", f"round {rnd + 1}/{req.rounds}, {cpus} vCPUs, "
                             f"xpfo={mode} ({done}/{total} boots, "
                             f"{printer.fmt_elapsed(elapsed)} elapsed"
                             + (f", ~{printer.fmt_elapsed(eta)} left)" if done else ")"))
                vanilla = mode == VANILLA
                greq = guest.GuestRequest(steps=steps_for(req, cpus, mode), cpus=cpus,
                                          mem_mb=req.mem_mb,
                                          params=[] if vanilla else [f"xpfo={mode}"],
                                          timeout=req.timeout, disk=True, extra_disks=disks,
                                          kernel=req.vanilla_kernel if vanilla else None,
                                          tcg_threads=req.tcg_threads,
                                          label=f"bench-{mode}-{cpus}cpu-r{rnd}")
                r = guest.run(greq)
                collect(r, req, mode, cpus, rnd, data)
                done += 1
    data.meta["elapsed_s"] = round(time.monotonic() - start, 1)
    return data


_LABEL = re.compile(r"bench-(?P<mode>[a-z]+)-(?P<cpus>\d+)cpu-r(?P<round>\d+)\.log$")


def from_logs(logs: Sequence[Path], req: BenchRequest, meta: Dict[str, object]) -> BenchData:
    """Rebuild the samples of a run from its saved guest logs (offline)."""
    data = BenchData(meta=dict(meta))
    seen = []
    for log in sorted(logs):
        m = _LABEL.search(log.name)
        if not m:
            continue
        mode, cpus, rnd = m.group("mode"), int(m.group("cpus")), int(m.group("round"))
        con = console.parse(log.read_text(errors="replace").splitlines())
        outcome = qemu.Outcome.POWERED_OFF if con.done else qemu.Outcome.CRASHED
        run = qemu.Run(qemu.Machine(kernel=Path("?"), initrd=Path("?")), outcome, 0.0, con, log)
        collect(run, req, mode, cpus, rnd, data)
        seen.append((mode, cpus, rnd))
    data.meta["modes"] = [m for m in req.modes if any(s[0] == m for s in seen)]
    data.meta["cpus"] = sorted({s[1] for s in seen})
    data.meta["rounds"] = len({s[2] for s in seen})
    data.meta["logs"] = len(seen)
    return data
