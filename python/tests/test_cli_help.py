"""`llamalloc --help`: its examples show the commands a user starts with."""
from __future__ import annotations

from llamalloc.cli import main


def test_help_examples_show_compare_and_top(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    examples = [line.split()[1] for line in out.splitlines() if line.strip().startswith("llamalloc ")]
    for name in ("record", "train", "run", "compare", "top", "trace", "simulate", "bench", "report"):
        assert name in examples, out
    # Each example is a command that exists.
    assert main(["compare", "--help"]) == 0 and main(["top", "--help"]) == 0
