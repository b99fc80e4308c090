"""The stress boot: memory offline/online, then the guest's stress step
(fork, THP, reclaim, page cache, ...) in one mode, with the direct-map audit
after each; judged by judge.stress_run."""

import json
import re
import time
from typing import Sequence

from . import guest, judge, machines, modes, printer
from .paths import LAYOUT, Layout, write_json


def _suffix(extra: Sequence[str]) -> str:
    """The extra parameters' names, for a guest label and a file name:
    "-page_poison" for page_poison=1; other characters than letters,
    digits, '_', '.' and '-' become '_'."""
    return "".join("-" + re.sub(r"[^\w.-]", "_", p.split("=")[0]) for p in extra)


def run(mode: str, cpus: int, seconds: int, mem_mb: int,
        machine: str = machines.DEFAULT, extra: Sequence[str] = ()) -> dict:
    """One stress boot, judged; `extra`: more kernel parameters."""
    # Memory offline/online first, on a fresh system, in a ZONE_MOVABLE
    # (movablecore=) with at least one whole block: a block the kernel has
    # put unmovable pages in, or the top block with its e820 hole, refuses.
    # nokaslr: a randomised kernel image can straddle the two middle blocks
    # (seen at 512 MiB: 0xf800000-0x107fffff), and then none goes offline.
    req = guest.GuestRequest(steps=["info", "disk", "hotplug", "audit:hotplug",
                                    f"stress:{seconds}", "audit:stress"], cpus=cpus,
                             mem_mb=mem_mb,
                             params=(modes.params(mode) + ["movablecore=50%", "nokaslr"]
                                     + list(extra)),
                             timeout=seconds * 3 + 420, disk=True, machine=machine,
                             label=f"stress-{mode}"
                             + ("" if machine == machines.DEFAULT else f"-{machine}")
                             + _suffix(extra))
    r = guest.run(req)
    con = r.console
    step = con.steps.get(f"stress:{seconds}")
    results = step.results if step else []
    verdict = judge.stress_run(r, f"stress:{seconds}")
    return {
        "mode": mode, "cpus": cpus, "seconds": seconds, "mem_mb": mem_mb, "machine": machine,
        "params": list(extra),
        "outcome": r.outcome.value, "log": str(r.log), "workers": results,
        "counters": next((x.get("counters") for x in results if "counters" in x), {}),
        "audits": judge.audits(con),
        "hotplug": judge.hotplug(con),
        # KUnit's cases, where the boot asked for them (kunit.enable=1)
        "kunit_cases": [c.__dict__ for c in con.ktap],
        "incidents": list(judge.incidents(con).reasons),
        **verdict.to_dict(),
        "passed": verdict.passed,
    }


def command_line(mode: str, cpus: int, seconds: int, mem_mb: int,
                 machine: str = machines.DEFAULT, extra: Sequence[str] = ()) -> str:
    return (f"./xpfo stress --mode {mode} --cpus {cpus} --seconds {seconds} --mem {mem_mb}"
            + ("" if machine == machines.DEFAULT else f" --machine {machine}")
            + "".join(f" --param {p}" for p in extra))


def run_and_record(mode: str, cpus: int, seconds: int, mem_mb: int,
                   machine: str = machines.DEFAULT, layout: Layout = LAYOUT,
                   extra: Sequence[str] = ()) -> dict:
    """`./xpfo stress`: one boot, its workers and verdict on the terminal,
    the result in out/stress-MODE.json (with the names of the extra
    parameters after MODE)."""
    res = run(mode, cpus, seconds, mem_mb, machine, extra)
    for w in res["workers"]:
        if "worker" in w:
            printer.raw(f"  {w['worker']:10} {w.get('status', '?'):5} "
                        f"iterations={w.get('iterations', '-')}")
    for reason in res["reasons"]:
        printer.raw(f"FAIL: {reason}")
    printer.raw(f"counters: {json.dumps(res['counters'], sort_keys=True)}")
    res["command"] = command_line(mode, cpus, seconds, mem_mb, machine, extra)
    res["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    write_json(layout.out / f"stress-{mode}{_suffix(extra)}.json", res)
    printer.info("stress", f"{'passed' if res['passed'] else 'FAILED'}: {res['outcome']}, "
                 f"log {res['log']}")
    return res
