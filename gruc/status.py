"""One line on the terminal, rewritten in place, saying what long work is doing.

Every command that can take long says so the same way: a phrase while it builds or compiles a
layer ("compiling ..."), or a bar while a study plans its configurations ("[####....] 12/40
1.3 s/config").  One class for both, so they look alike, share the rule for when to draw, and a
fix to one (a terminal that does not understand the clear-to-end escape, say) is a fix to all.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

CLEAR = "\r\033[K"
"""Back to the line's start, then clear to its end (ANSI / VT100)."""

BAR_WIDTH = 30


class StatusLine:
    """A status line on ``stream`` (default stderr), drawn only where a user watches: when
    ``stream`` and stdout are terminals (``enabled`` forces it on or off), so pipes, files and
    tests get clean output.  Use as a context manager: a phrase is erased at the end, a progress
    bar is kept (it ends with a newline) so the last count stays readable."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None,
                 unit: str = "config") -> None:
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = sys.stdout.isatty() and self.stream.isatty()
        self.enabled = enabled
        self.unit = unit
        """What a progress bar counts (``s/config``; ``12 plans`` when the total is unknown)."""
        self.start = time.perf_counter()
        self.shown = False
        self.bar = False

    def show(self, text: str) -> None:
        """Draw ``text`` in place of what the line said."""
        if self.enabled:
            self.stream.write(CLEAR + text)
            self.stream.flush()
            self.shown = True

    def progress(self, done: int, total: int | None = None, note: str = "") -> None:
        """Draw a bar: ``done`` of ``total`` (a count alone when the total is not known in
        advance, as in a search), the mean seconds per item so far, and ``note``."""
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        rate = f"{elapsed / done:.2f} s/{self.unit}" if done else ""
        if total:
            filled = BAR_WIDTH * done // total
            head = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{total}"
        else:
            head = f"{done} {self.unit}s"
        self.show(" ".join(part for part in (head, rate, note) if part))
        self.bar = True

    def close(self) -> None:
        """End the line: keep a bar (a newline after it), erase a phrase."""
        if self.shown:
            self.stream.write("\n" if self.bar else CLEAR)
            self.stream.flush()
            self.shown = self.bar = False

    def __enter__(self) -> "StatusLine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
