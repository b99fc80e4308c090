"""The one exception type the CLI turns into a clear message and exit code."""

import shlex
import subprocess


class HarnessError(Exception):
    """A failure the user can act on: what happened, and what to do about it."""

    def __init__(self, what: str, hint: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.what}\n  hint: {self.hint}"
        return self.what


def from_called_process(e: subprocess.CalledProcessError) -> HarnessError:
    """An external command that failed, as one line: the command (pasteable)
    and its exit status, with the last line it wrote to stderr if any."""
    cmd = e.cmd if isinstance(e.cmd, str) else shlex.join(str(c) for c in e.cmd)
    out = e.stderr if e.stderr is not None else e.output
    if isinstance(out, bytes):
        out = out.decode("utf-8", errors="replace")
    last = next((line.strip() for line in reversed((out or "").splitlines()) if line.strip()), "")
    status = (f"killed by signal {-e.returncode}" if e.returncode < 0
              else f"exit status {e.returncode}")
    return HarnessError(f"command failed ({status}): {cmd}" + (f": {last}" if last else ""),
                        "run the command above by hand to see all of its output")
