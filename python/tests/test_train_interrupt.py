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


def test_ctrl_c_in_train_writes_the_best_model_so_far(tmp_path):
    out = tmp_path / "m.model"
    proc = subprocess.Popen([sys.executable, "-m", "llamalloc", "train", str(DATA / "prof_sites.prof"), "-o",
                             str(out), "--epochs", "10000", "--hidden", "16"], stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("epoch   2/"):
                proc.send_signal(signal.SIGINT)
                break
        rest = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines) + rest[1]
    assert proc.returncode == 0, err
    assert "interrupted: keeping epoch" in err and "the best model so far is written" in err
    assert modelfile.read(out).metadata["interrupted"] is True
