"""Progress bars with a time estimate (tqdm) for the long steps: train, simulate, prepare, bench, compare,
top.

On a terminal a bar is drawn on stderr and the step's lines are printed above it; elsewhere (a log, a pipe, the
tests) only the lines are printed, as before."""
from __future__ import annotations

import sys
from typing import Callable


class Bar:
    def __init__(self, total: int | None, desc: str, unit: str, prefix: str = ""):
        from tqdm import tqdm

        self.prefix = prefix
        self.bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True,
                        disable=not sys.stderr.isatty())

    @property
    def enabled(self) -> bool:
        return not self.bar.disable

    def line(self, text: str) -> None:
        if self.enabled:
            self.bar.write(f"{self.prefix}{text}", file=sys.stderr)
        else:
            print(f"{self.prefix}{text}", file=sys.stderr, flush=True)

    def advance(self, n: int = 1, total: int | None = None) -> None:
        if total is not None and total != self.bar.total:
            self.bar.total = total
        self.bar.update(n)

    def set(self, done: int, total: int | None = None) -> None:
        self.advance(done - self.bar.n, total)

    def describe(self, text: str) -> None:
        """The bar's label: the step under way (drawn only on a terminal)."""
        self.bar.set_description_str(text)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def lines(bar: Bar) -> Callable[[str], None]:
    return bar.line
