"""Pure parsing of a guest's serial console: steps, results, KTAP and oopses.

The guest runner (guest/init) frames its steps as a KTAP document on the
console, so that any KTAP parser sees a runner that stopped early as such
(fewer results than the plan):

    KTAP version 1
    1..<number of steps>
    # XH-STEP-BEGIN <name>
    ... the step's output and the kernel's messages ...
    ok <n> <name>                      (exit status 0)
    not ok <n> <name> # exit <status>
    # XH-DONE

The steps' results (JSON) travel on the guest's second serial port, one line
each, named by their step, and the host copies them into the same log:

    XH-RESULT <name> {...}
    XH-END <n> <name> <status>         (the step's end again, where no
                                        kernel message can cut it)

Logs written before that framing are still understood: XH-STEP-BEGIN <name>,
XH-STEP-END <name> <status>, XH-DONE without '# ', and RESULT {...} lines
on the console.

Every kernel problem report (oops, BUG, WARNING, panic, GPF, KASAN, UBSAN,
RCU stall) is an Incident, attributed to the step during which it appeared.
"""

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set

from .errors import HarnessError

_TS = re.compile(r"^\[\s*\d+\.\d+\]\s?")
_PREFIX = re.compile(r"^(?:<\d>)?")

INCIDENT_PATTERNS = [
    ("oops", re.compile(r"\bOops\b|Oops:")),
    ("bug", re.compile(r"\bBUG:|kernel BUG at")),
    ("warning", re.compile(r"\bWARNING:")),
    ("panic", re.compile(r"Kernel panic - not syncing")),
    ("gpf", re.compile(r"general protection fault")),
    ("kasan", re.compile(r"KASAN:")),
    ("ubsan", re.compile(r"UBSAN:")),
    ("rcu-stall", re.compile(r"rcu: INFO: .* (self-)?detected stall|"
                             r"rcu_(sched|preempt) (self-)?detected stall")),
    ("hung-task", re.compile(r"INFO: task .* blocked for more than")),
    # slab's kmalloc_fix_flags(): a dump_stack() with no WARNING: header
    ("bad-gfp", re.compile(r"Unexpected gfp: ")),
    # page poisoning's check at allocation (mm/page_poison.c): a dump_stack()
    ("page-poison", re.compile(r"pagealloc: (memory corruption|single bit error)")),
]
_END_TRACE = re.compile(r"---\[ end (trace|Kernel panic)")
_TRACE_MAX = 60


def strip(line: str) -> str:
    """Drop the printk timestamp and log level prefix, and trailing CR/LF."""
    line = line.rstrip("\r\n")
    line = _PREFIX.sub("", line, count=1)
    return _TS.sub("", line, count=1)


@dataclass
class Incident:
    kind: str
    first_line: str
    step: Optional[str]
    lines: List[str] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join(self.lines)

    def mentions(self, pattern: str) -> bool:
        rx = re.compile(pattern)
        return any(rx.search(line) for line in self.lines)


@dataclass
class Step:
    name: str
    ended: bool = False
    exit_status: Optional[int] = None
    lines: List[str] = field(default_factory=list)
    results: List[dict] = field(default_factory=list)


@dataclass
class KtapCase:
    suite: str
    name: str
    status: str  # 'pass', 'fail', 'skip'


@dataclass
class Console:
    lines: List[str] = field(default_factory=list)
    steps: Dict[str, Step] = field(default_factory=dict)
    order: List[str] = field(default_factory=list)
    incidents: List[Incident] = field(default_factory=list)
    ktap: List[KtapCase] = field(default_factory=list)
    # KUnit suites' plans (1..N inside '# Subtest: <suite>')
    ktap_plans: Dict[str, int] = field(default_factory=dict)
    planned: Optional[int] = None   # the runner's plan: how many steps it will run
    reported: int = 0               # steps ended (ok/not ok, XH-END, XH-STEP-END)
    done: bool = False
    errors: List[str] = field(default_factory=list)

    def results(self) -> List[dict]:
        return [r for s in self.order for r in self.steps[s].results]

    def incidents_in(self, step: Optional[str]) -> List[Incident]:
        return [i for i in self.incidents if i.step == step]

    def runner_finished(self) -> bool:
        """The runner reported a result for every step of its plan.

        A log without a plan (written before the KTAP framing) counts as
        finished when the runner said XH-DONE."""
        if self.planned is not None:
            return self.reported >= self.planned
        return self.done


_RESULT = re.compile(r"RESULT (.*?)\s*$")
_XRESULT = re.compile(r"^XH-RESULT (\S+) (.*?)\s*$")
_BEGIN = re.compile(r"^(?:# )?XH-STEP-BEGIN (\S+)")
_END = re.compile(r"^XH-STEP-END (\S+) (-?\d+)")
_XEND = re.compile(r"^XH-END (\d+) (\S+) (-?\d+)\s*$")
_DONE = re.compile(r"^(?:# )?XH-DONE\b")
# The runner's KTAP result line for the step in progress.
_STEP_RESULT = re.compile(r"^(not ok|ok) (\d+) (\S+)(?:\s+#\s*exit (-?\d+))?")
_PLAN = re.compile(r"^1\.\.(\d+)\s*$")
_KTAP_SUITE = re.compile(r"^\s*# Subtest: (\S+)")
_KTAP_PLAN = re.compile(r"^\s+1\.\.(\d+)\s*$")
_KTAP_CASE = re.compile(r"^(\s+)(not ok|ok) \d+ (\S+)(?:\s+#\s*(SKIP|TODO).*)?$")


class Parser:
    """Incremental parser: feed lines as they come, read .console at any time."""

    def __init__(self) -> None:
        self.console = Console()
        self._current: Optional[str] = None
        self._incident: Optional[Incident] = None
        self._suite: Optional[str] = None
        self._plan: Optional[int] = None   # the last top-level KTAP plan seen
        self._ended: Set[int] = set()      # step numbers counted as ended
        self._begun = False                # the console has shown a step begin

    def feed(self, raw: str) -> None:
        c = self.console
        line = strip(raw)
        c.lines.append(line)
        m = _XRESULT.match(line)
        if m:
            # from the results port: whole lines, named by their step
            self._result(m.group(2), line, m.group(1))
            return
        m = _XEND.match(line)
        if m:
            # from the results port too, in order after the step's results;
            # the console's "ok" line may come before or after it, or be cut.
            # The console alone says which step its lines belong to.
            self._end(m.group(2), int(m.group(3)), int(m.group(1)))
            return
        ended = False
        if self._incident is not None:
            self._incident.lines.append(line)
            if _END_TRACE.search(line) or len(self._incident.lines) >= _TRACE_MAX:
                self._incident = None
                ended = True
        for kind, rx in INCIDENT_PATTERNS if not ended else ():
            if rx.search(line) and not line.startswith("RESULT "):
                if self._incident is None or kind in ("panic",):
                    inc = Incident(kind, line, self._current, [line])
                    c.incidents.append(inc)
                    self._incident = inc
                break
        m = _BEGIN.match(line)
        if m:
            self._begin(m.group(1))
            return
        m = _END.match(line)
        if m:
            self._end(m.group(1), int(m.group(2)))
            self._current = None
            return
        m = _STEP_RESULT.match(line)
        if m and m.group(3) == self._current:
            rc = m.group(4)
            self._end(m.group(3), int(rc) if rc is not None else
                      (0 if m.group(1) == "ok" else 1), int(m.group(2)))
            self._current = None
            return
        if _DONE.match(line):
            c.done = True
            return
        m = _PLAN.match(line)
        if m:
            self._plan = int(m.group(1))
        m = _RESULT.search(line)
        if m:
            self._result(m.group(1), line, self._current)
            return
        m = _KTAP_SUITE.search(line)
        if m:
            self._suite = m.group(1)
        elif self._suite and (m := _KTAP_PLAN.match(line)):
            c.ktap_plans.setdefault(self._suite, int(m.group(1)))
        else:
            m = _KTAP_CASE.match(line)
            if m and self._suite:
                status = "pass" if m.group(2) == "ok" else "fail"
                if m.group(4) == "SKIP":
                    status = "skip"
                c.ktap.append(KtapCase(self._suite, m.group(3), status))
        if self._current is not None:
            c.steps[self._current].lines.append(line)

    def _begin(self, name: str) -> None:
        c = self.console
        if c.planned is None and self._plan is not None and not self._begun:
            # the plan printed just before the first step is the runner's;
            # the results port may have named the step already
            c.planned = self._plan
        self._begun = True
        self._current = name
        if name not in c.steps:
            c.steps[name] = Step(name)
            c.order.append(name)

    def _end(self, name: str, status: int, number: Optional[int] = None) -> None:
        """A step ended; `number` (its place in the plan) counts it once
        when both ports report it."""
        if number is None or number not in self._ended:
            self.console.reported += 1
            if number is not None:
                self._ended.add(number)
        st = self.console.steps.get(name)
        if st is not None:
            st.ended = True
            st.exit_status = status

    def _result(self, text: str, line: str, current: Optional[str]) -> None:
        c = self.console
        try:
            res = json.loads(text)
        except json.JSONDecodeError as e:
            c.errors.append(f"bad RESULT line ({e}): {line}")
            return
        if not isinstance(res, dict):
            c.errors.append(f"RESULT is not an object: {line}")
            return
        step = str(res.get("step", current or "?"))
        if step not in c.steps:
            c.steps[step] = Step(step)
            c.order.append(step)
        c.steps[step].results.append(res)


def parse(lines: Iterable[str]) -> Console:
    p = Parser()
    for line in lines:
        p.feed(line)
    return p.console


def read(path: Path) -> Console:
    """Parse a saved console log."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        raise HarnessError(f"cannot read {path}: {e}") from None
    return parse(text.splitlines())


def describe(con: Console) -> List[str]:
    """What `./xpfo parse` prints of a log: each step, its results, the
    incidents, the KTAP cases and whether the runner finished."""
    out = []
    for name in con.order:
        st = con.steps[name]
        state = f"exit {st.exit_status}" if st.ended else "did not finish"
        out.append(f"step {name}: {state}, {len(st.results)} results")
        for res in st.results:
            out.append(f"  RESULT {json.dumps(res, sort_keys=True)}")
    for inc in con.incidents:
        out.append(f"incident {inc.kind} during {inc.step or 'boot'}: {inc.first_line}")
    for case in con.ktap:
        out.append(f"ktap {case.suite}.{case.name}: {case.status}")
    plan = f" ({con.reported} of {con.planned} steps)" if con.planned is not None else ""
    out.append(f"runner finished: {'yes' if con.runner_finished() else 'no'}{plan}")
    return out
