"""Ctrl-C in `llamalloc train` keeps the best model of the epochs already finished."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from llamalloc.model import lstm, modelfile

DATA = Path(__file__).resolve().parent / "data"


def test_interrupt_keeps_the_best_finished_epoch():
    rng = np.random.default_rng(0)
    ids = rng.integers(4, 20, size=(64, 6)).astype(np.int32)
    lengths = np.full(64, 6, np.int32)
    labels = rng.integers(0, 8, 64)
    weights = np.ones(64)
    calls = []

    def progress(line):
        calls.append(line)
        if line.startswith("epoch   3/"):
            raise KeyboardInterrupt

    config = lstm.TrainConfig(hidden_dim=16, embedding_dim=8, max_epochs=50, examples_per_epoch=64)
    result = lstm.train(ids, lengths, labels, weights, 24, config, None, progress)
    assert result.interrupted
    assert result.best_epoch in (1, 2) and result.epochs_run == 3
    assert any(c.startswith("interrupted: keeping epoch") for c in calls)


def interrupted_train(out: Path, epochs: int, at) -> tuple[int, str, bool]:
    """`llamalloc train` of the test profile into `out`, sent SIGINT (Ctrl-C) once at(the stderr lines so far)
    holds: its exit status, its whole stderr, and whether it was sent."""
    proc = subprocess.Popen([sys.executable, "-m", "llamalloc", "train", str(DATA / "prof_sites.prof"), "-o",
                             str(out), "--epochs", str(epochs), "--hidden", "16"], stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            # the default handler: a test run in the background or under nohup ignores SIGINT,
                            # and a child inherits that
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines, sent = [], False
    try:
        for line in proc.stderr:
            lines.append(line)
            if at(lines):
                proc.send_signal(signal.SIGINT)
                sent = True
                break
        rest = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(lines) + rest[1], sent


def test_ctrl_c_in_train_exits_130_and_writes_the_best_model_so_far_as_partial(tmp_path):
    out = tmp_path / "m.model"
    returncode, err, _ = interrupted_train(out, 10000, lambda lines: lines[-1].startswith("epoch   2/"))
    # A script's `train && deploy` stops; OUTPUT is not written, the partial model says what it is by its name.
    assert returncode == 130, err
    assert "interrupted: keeping epoch" in err and f"written to {out}.partial; {out} not written" in err, err
    assert "Traceback" not in err
    assert not out.exists()
    assert modelfile.read(f"{out}.partial").metadata["interrupted"] is True


def test_ctrl_c_while_the_refit_compiles_writes_the_split_model_as_partial(tmp_path):
    out = tmp_path / "m.model"
    # At the second compilation, the refit's: the split run is over.
    returncode, err, sent = interrupted_train(
        out, 40, lambda lines: sum(line.startswith("compiling the training step") for line in lines) == 2)
    assert sent, err
    assert returncode == 130, err
    assert "the refit was interrupted" in err and f"written to {out}.partial" in err and "Traceback" not in err
    assert not out.exists()
    assert modelfile.read(f"{out}.partial").metadata["refit"] is False
