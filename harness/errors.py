"""The one exception type the CLI turns into a clear message and exit code."""


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
