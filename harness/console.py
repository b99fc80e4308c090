"""Pure parsing of a guest's serial console: steps, results, KTAP and oopses.

The guest runner frames its work with marker lines:

    XH-STEP-BEGIN <name>
    RESULT {"step": "<name>", ...}
    XH-STEP-END <name> <exit status>
    XH-DONE

Every kernel problem report (oops, BUG, WARNING, panic, GPF, KASAN, UBSAN,
RCU stall) is an Incident, attributed to the step during which it appeared.
"""

import json
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional

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
    done: bool = False
    errors: List[str] = field(default_factory=list)

    def results(self) -> List[dict]:
        return [r for s in self.order for r in self.steps[s].results]

    def incidents_in(self, step: Optional[str]) -> List[Incident]:
        return [i for i in self.incidents if i.step == step]


_RESULT = re.compile(r"RESULT (.*?)\s*$")
_BEGIN = re.compile(r"^XH-STEP-BEGIN (\S+)")
_END = re.compile(r"^XH-STEP-END (\S+) (-?\d+)")
# A kernel message, which the console can print in the middle of a line that
# userspace is writing.
_KMSG = re.compile(r"\[\s*\d+\.\d+\] ")
_SPLIT_MAX = 20  # kernel lines to wait through for the rest of a RESULT
_KTAP_SUITE = re.compile(r"^\s*# Subtest: (\S+)")
_KTAP_CASE = re.compile(r"^(\s+)(not ok|ok) \d+ (\S+)(?:\s+#\s*(SKIP|TODO).*)?$")


class Parser:
    """Incremental parser: feed lines as they come, read .console at any time."""

    def __init__(self) -> None:
        self.console = Console()
        self._current: Optional[str] = None
        self._incident: Optional[Incident] = None
        self._suite: Optional[str] = None
        # A RESULT line cut by a kernel message: its text so far, and how
        # many kernel lines have come since.
        self._split: Optional[str] = None
        self._split_lines = 0

    def feed(self, raw: str) -> None:
        c = self.console
        kmsg = bool(_KMSG.match(_PREFIX.sub("", raw, count=1)))
        line = strip(raw)
        c.lines.append(line)
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
        if self._split is not None:
            if not kmsg:
                text, self._split = self._split + line, None
                try:
                    json.loads(text)
                except json.JSONDecodeError:
                    # not the rest of it: report, and take the line as it is
                    c.errors.append(f"RESULT line cut and not completed: {text}")
                else:
                    self._result(text, line)
                    return
            else:
                self._split_lines += 1
            if self._split is not None and self._split_lines > _SPLIT_MAX:
                c.errors.append(f"RESULT line never completed: {self._split}")
                self._split = None
        m = _BEGIN.match(line)
        if m:
            self._current = m.group(1)
            if self._current not in c.steps:
                c.steps[self._current] = Step(self._current)
                c.order.append(self._current)
            return
        m = _END.match(line)
        if m:
            st = c.steps.get(m.group(1))
            if st is not None:
                st.ended = True
                st.exit_status = int(m.group(2))
            self._current = None
            return
        if line.startswith("XH-DONE"):
            c.done = True
            return
        m = _RESULT.search(line)
        if m:
            cut = _KMSG.search(m.group(1))
            if cut:
                # The rest of the JSON follows the kernel's lines.
                self._split, self._split_lines = m.group(1)[:cut.start()], 0
                return
            self._result(m.group(1), line)
            return
        m = _KTAP_SUITE.search(line)
        if m:
            self._suite = m.group(1)
        else:
            m = _KTAP_CASE.match(line)
            if m and self._suite:
                status = "pass" if m.group(2) == "ok" else "fail"
                if m.group(4) == "SKIP":
                    status = "skip"
                c.ktap.append(KtapCase(self._suite, m.group(3), status))
        if self._current is not None:
            c.steps[self._current].lines.append(line)

    def _result(self, text: str, line: str) -> None:
        c = self.console
        try:
            res = json.loads(text)
        except json.JSONDecodeError as e:
            c.errors.append(f"bad RESULT line ({e}): {line}")
            return
        if not isinstance(res, dict):
            c.errors.append(f"RESULT is not an object: {line}")
            return
        step = str(res.get("step", self._current or "?"))
        if step not in c.steps:
            c.steps[step] = Step(step)
            c.order.append(step)
        c.steps[step].results.append(res)


def parse(lines: Iterable[str]) -> Console:
    p = Parser()
    for line in lines:
        p.feed(line)
    return p.console
