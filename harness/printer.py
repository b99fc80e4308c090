"""The single place where the harness writes to the terminal."""

import shlex
import sys
import time
from typing import Sequence


def info(stage: str, msg: str) -> None:
    print(f"[{stage}] {msg}", file=sys.stdout, flush=True)


def warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr, flush=True)


def error(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)


def command(cmd: Sequence[str], cwd: str | None = None) -> None:
    """Print an external command so that it can be pasted into a shell."""
    text = shlex.join(str(c) for c in cmd)
    if cwd:
        text = f"(cd {shlex.quote(cwd)} && {text})"
    print(f"$ {text}", file=sys.stdout, flush=True)


def raw(text: str) -> None:
    print(text, file=sys.stdout, flush=True)


def fmt_elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


class Progress:
    """Rate-limited progress line for long steps."""

    def __init__(self, stage: str, every: float = 10.0) -> None:
        self.stage = stage
        self.every = every
        self.start = time.monotonic()
        self._last = 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def update(self, msg: str, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last >= self.every:
            self._last = now
            info(self.stage, f"{msg} ({fmt_elapsed(self.elapsed())})")
