"""Kconfig fragments as data: parse, and verify against a generated .config."""

import re
from dataclasses import dataclass
from typing import Dict, Iterable, List

_SET = re.compile(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$")
_UNSET = re.compile(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$")


@dataclass(frozen=True)
class Option:
    name: str
    value: str  # 'y', 'm', 'n', a number or a quoted string

    def __str__(self) -> str:
        if self.value == "n":
            return f"# {self.name} is not set"
        return f"{self.name}={self.value}"


class ConfigParseError(ValueError):
    pass


def parse(text: str, strict: bool = True) -> Dict[str, Option]:
    """Parse a fragment or a .config into name -> Option.

    In strict mode (fragments), any line that is neither an option, an
    "is not set" line, a comment nor blank is an error, and so is an option
    given twice with different values.
    """
    opts: Dict[str, Option] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _SET.match(line)
        if m:
            opt = Option(m.group(1), m.group(2))
        else:
            m = _UNSET.match(line)
            if m:
                opt = Option(m.group(1), "n")
            elif not line or line.startswith("#"):
                continue
            elif strict:
                raise ConfigParseError(f"line {lineno}: not a Kconfig option: {raw!r}")
            else:
                continue
        prev = opts.get(opt.name)
        if strict and prev is not None and prev != opt:
            raise ConfigParseError(
                f"line {lineno}: {opt.name} given twice ({prev} and {opt})")
        opts[opt.name] = opt
    return opts


@dataclass(frozen=True)
class Mismatch:
    wanted: Option
    got: str  # what .config has, or 'absent'

    def __str__(self) -> str:
        return f"{self.wanted} (got: {self.got})"


def verify(fragment: Dict[str, Option], dotconfig: Dict[str, Option]) -> List[Mismatch]:
    """Every fragment option must be in .config with the same value.

    An option the fragment disables is satisfied when .config lacks it too
    (its dependencies are off, so it cannot be set).
    """
    bad: List[Mismatch] = []
    for name, want in fragment.items():
        have = dotconfig.get(name)
        if have is None:
            if want.value != "n":
                bad.append(Mismatch(want, "absent"))
        elif have.value != want.value:
            bad.append(Mismatch(want, str(have)))
    return bad


def describe(mismatches: Iterable[Mismatch]) -> str:
    lines = [f"  {m}" for m in mismatches]
    return "\n".join(lines)
