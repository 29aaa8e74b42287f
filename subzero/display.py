"""What a run shows on stderr while it runs: its lines, and how far it is.

The runner (:func:`subzero.engine.runner.execute`) draws nothing: it hands lines to a
``notify`` callable and reports each operator it records to an ``on_progress(name, done,
total)`` callable. :class:`RunDisplay` is both, for the command line and the Python API:
on a terminal a progress bar (tqdm), which a line clears first; elsewhere (a log, a
notebook, a pipe) a line on the operators done at most every :data:`PROGRESS_EVERY_S`
seconds.

This module sits beside the API rather than under :mod:`subzero.cli`: the API, which lies
below the command line in the layers, shows the same display.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, Callable

#: with stderr not a terminal, a line on the operators done at most this often (seconds)
PROGRESS_EVERY_S = 5.0


class Lines:
    """Progress as lines: the operators done so far, at most every ``every`` seconds
    (the last one is not said: the run's own summary follows at once); the part of
    tqdm's interface :class:`RunDisplay` uses.

    Examples
    --------
    >>> said = []
    >>> lines = Lines(3, said.append, every=0.0)
    >>> for name in ("a", "b", "c"):
    ...     lines.set_description(name)
    ...     lines.update(1)
    >>> [line.split(" (")[0] for line in said]
    ['1/3 operators done', '2/3 operators done']
    """

    def __init__(self, total: int, notify: Callable[[str], None], every: float) -> None:
        self.total, self.notify, self.every = total, notify, every
        self.n, self.name = 0, ""
        self.t0 = self.last = time.monotonic()

    def set_description(self, name: str) -> None:
        self.name = name

    def update(self, k: int = 1) -> None:
        self.n += k
        now = time.monotonic()
        if now - self.last >= self.every and self.n < self.total:
            self.last = now
            self.notify(f"{self.n}/{self.total} operators done ({self.name}; "
                        f"{now - self.t0:.0f} s)")

    def close(self) -> None:
        pass


def progress_bar(total: int, say: Callable[[str], None]) -> Any:
    """A tqdm bar of ``total`` operators on a terminal's stderr, else :class:`Lines`
    said through ``say`` (None when tqdm is missing)."""
    if not sys.stderr.isatty():
        return Lines(total, say, PROGRESS_EVERY_S)
    try:
        from tqdm import tqdm  # optional: a progress bar only on a terminal
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, delay=1.0, file=sys.stderr, unit="op", leave=False,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} operators [{elapsed}]")


class RunDisplay:
    """A run's lines and progress on stderr: pass :meth:`notify` and :meth:`progress` to
    :func:`subzero.engine.runner.execute`, and close it (or use it as a context manager)
    once the run ends.

    Parameters
    ----------
    say : prints one line (:func:`subzero.api.say`).

    Examples
    --------
    >>> said = []
    >>> with RunDisplay(said.append) as shown:
    ...     shown.notify("input x: generated")
    ...     shown.progress("", 0, 2)
    ...     shown.progress("a", 1, 2)
    >>> said[0]
    'input x: generated'
    """

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.bar: Any = None
        self.started = False

    def notify(self, line: str) -> None:
        """Say ``line``, a progress bar on the terminal cleared first."""
        clear = getattr(self.bar, "clear", None)
        if clear is not None:
            clear()
        self.say(line)

    def progress(self, name: str, done: int, total: int) -> None:
        """Operator ``name`` is recorded, ``done`` of ``total`` (``("", 0, total)``: the
        stages start, and so does the bar's clock)."""
        if not self.started:
            self.started = True
            self.bar = progress_bar(total, self.say)
        if self.bar is None or done <= self.bar.n:
            return
        self.bar.set_description(name)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "RunDisplay":
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
