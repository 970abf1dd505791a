"""No surprises in the CLI on a user's own program. Mistyped options, directories, wrapper scripts,
models of other programs, misspelled LLAMALLOC_* variables, what record and trace say when they are done,
compressed traces and --duration, and the README's commands naming the files the commands write."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from llamalloc import simulate as sim, trace as _trace
from llamalloc.model import modelfile
from llamalloc.paths import native_library

from predict_support import random_model
from test_profiler_common import llamalloc

REPO = Path(__file__).resolve().parents[2]

ALLOC_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 20000;
  void* keep[256] = {0};
  for (long i = 0; n < 0 || i < n; i++) {
    char* p = malloc(64 + (i % 7) * 32);
    memset(p, 1, 64);
    free(keep[i % 256]);
    keep[i % 256] = p;
    if (n < 0) usleep(1000);
  }
  for (int k = 0; k < 256; k++) free(keep[k]);
  puts("done");
  return 0;
}
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A small program of the user's own (outside the checkout), a wrapper script that runs it, and a model
    trained on another program; token tables are cached for the module."""
    d = tmp_path_factory.mktemp("cli")
    src = d / "alloc.c"
    src.write_text(ALLOC_C)
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-O1", "-g", "-fno-omit-frame-pointer", "-o", str(d / "alloc"), str(src)], check=True)
    (d / "start.sh").write_text(f'#!/bin/sh\n"{d}/alloc" "$@"\necho after\n')
    (d / "start.sh").chmod(0o755)
    model = random_model()
    model.program = "/usr/local/bin/some-other-server"
    modelfile.write(d / "other.model", model)
    env = dict(os.environ, LLAMALLOC_CACHE_DIR=str(d / "cache"))
    return d, env


def one_error_line(r) -> str:
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 and lines[0].startswith("llamalloc: error: "), r.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["record", "trace", "run"])
def test_mistyped_option_is_an_option_error_not_the_program(work, command):
    d, env = work
    r = llamalloc(command, "--sample-byte", "1", "--", d / "alloc", cwd=d, env=env)
    line = one_error_line(r)
    assert r.returncode == 2 and "no such option: --sample-byte" in line
    if command == "record":
        assert "did you mean --sample-bytes?" in line
    assert not list(d.glob("llamalloc.prof*")) and "done" not in r.stdout


@pytest.mark.parametrize("args", [["run", "--model", "{model}", "--", "{dir}"], ["run", "--", "{dir}"],
                                  ["prepare", "{model}", "{dir}"], ["prepare", "--no-libraries", "{model}", "{dir}"]])
def test_a_directory_as_the_program_is_one_line(work, args):
    d, env = work
    r = llamalloc(*[a.format(model=d / "other.model", dir=d) for a in args], env=env)
    assert "is a directory" in one_error_line(r)


def test_prepare_accepts_a_file_in_the_current_folder(work, tmp_path):
    d, env = work
    r = llamalloc("prepare", d / "other.model", "alloc", "-o", tmp_path / "t.tokens", cwd=d, env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "t.tokens").stat().st_size > 0


def test_record_through_a_forking_script_keeps_the_child_profile(work, tmp_path):
    d, env = work
    out = tmp_path / "s.prof"
    r = llamalloc("record", "-o", out, "--", d / "start.sh", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0
    assert f"profile written to {out}" in r.stderr and "child process" in r.stderr
    assert "addresses symbolized" in r.stderr and f"next: llamalloc train {out}" in r.stderr  # (record symbolizes)


def test_run_model_through_a_wrapper_script_asks_for_the_binary(work):
    d, env = work
    r = llamalloc("run", "--model", d / "other.model", "--", d / "start.sh", env=env)
    line = one_error_line(r)
    assert "start.sh" in line and "--binary" in line and "done" not in r.stdout
    r = llamalloc("run", "--model", d / "other.model", "--binary", d / "alloc", "--", d / "start.sh", env=env)
    assert r.returncode == 0, r.stderr
    assert "done" in r.stdout and "after" in r.stdout
    assert "LLAMALLOC_TOKENS" not in r.stderr  # the tables were prepared and passed


def test_model_of_another_program_is_warned_about(work):
    d, env = work
    r = llamalloc("run", "--model", d / "other.model", "--", d / "alloc", env=env)
    assert r.returncode == 0, r.stderr
    assert re.search(r"warning: .*other\.model was trained on /usr/local/bin/some-other-server, not on .*alloc",
                     r.stderr), r.stderr


def test_preload_warns_about_a_model_without_tokens_and_misspelled_variables(work):
    d, _ = work
    env = dict(os.environ, LD_PRELOAD=str(native_library("libllamalloc.so")), LLAMALLOC_MODEL=str(d / "other.model"),
               LLAMALLOC_DEADLIN_K="3", LLAMALLOC_PROF_ANYTHING="1")
    r = subprocess.run([str(d / "alloc"), "10"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0
    assert "LLAMALLOC_MODEL is set without LLAMALLOC_TOKENS" in r.stderr
    assert r.stderr.count("LLAMALLOC_DEADLIN_K is not a llamalloc option (did you mean LLAMALLOC_DEADLINE_K?)") == 1
    assert "PROF_ANYTHING" not in r.stderr  # the profiler's variables are ours


def test_trace_is_compressed_says_where_it_went_and_simulate_reads_it(work, tmp_path):
    d, env = work
    out = tmp_path / "a.trace"
    r = llamalloc("trace", "-o", out, "--", d / "alloc", "50000", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:4] == _trace.ZSTD_MAGIC
    assert re.search(rf"trace of \d+ events written to {re.escape(str(out))} \(.*zstd from", r.stderr)
    assert f"next: llamalloc simulate {out}" in r.stderr
    assert len(_trace.load(out).events) >= 100000
    r = llamalloc("simulate", out, "-p", "pages-4k", "-o", tmp_path / "a.sim.json", "-q", env=env)
    assert r.returncode == 0, r.stderr
    assert sim.load(tmp_path / "a.sim.json").policies["pages-4k"].summary["allocs"] >= 50000
    plain = tmp_path / "p.trace"
    llamalloc("trace", "--no-compress", "-o", plain, "--", d / "alloc", "10", env=env, check_rc=0)
    assert plain.read_bytes()[:8] == _trace.TRACE_MAGIC


def test_a_cut_compressed_trace_is_one_line(work, tmp_path):
    d, env = work
    out = tmp_path / "a.trace"
    llamalloc("trace", "-o", out, "--", d / "alloc", "50000", env=env, check_rc=0)
    cut = tmp_path / "cut.trace"
    cut.write_bytes(out.read_bytes()[: out.stat().st_size // 2])
    r = llamalloc("simulate", cut, "-p", "pages-4k", "-o", tmp_path / "c.json", env=env)
    assert "cut.trace" in one_error_line(r)


def test_trace_duration_stops_the_program_and_keeps_a_complete_trace(work, tmp_path):
    d, env = work
    out = tmp_path / "l.trace"
    r = llamalloc("trace", "--duration", "1", "-o", out, "--", d / "alloc", "-1", env=env)
    assert r.returncode == 0, r.stderr
    assert "after 1 s (--duration)" in r.stderr
    assert len(_trace.load(out).events) > 0  # complete: it has its end record


def test_simulate_refuses_a_missing_output_folder_before_replaying(work, tmp_path):
    d, env = work
    t = tmp_path / "a.trace"
    llamalloc("trace", "-o", t, "--", d / "alloc", "10", env=env, check_rc=0)
    r = llamalloc("simulate", t, "-p", "pages-4k", "-o", tmp_path / "missing" / "dir" / "x.json", env=env)
    assert "missing/dir" in one_error_line(r)
    assert "replaying" not in r.stderr


def test_readme_report_names_the_file_simulate_writes():
    text = (REPO / "README.md").read_text()
    simulate = re.search(r"^llamalloc simulate (\S+)(.*)$", text, re.M)
    report = re.search(r"^llamalloc report --sim (\S+)", text, re.M)
    assert simulate and report
    assert "-o" not in simulate.group(2).split()
    assert report.group(1) == str(sim.default_output(simulate.group(1)))


def _stderr_on_a_terminal(args, env) -> str:
    import pty
    import sys

    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a terminal 120 columns wide
    proc = subprocess.Popen([sys.executable, "-m", "llamalloc", *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the other end is closed
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(master)
    assert proc.returncode == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_simulate_and_prepare_draw_a_progress_bar_on_a_terminal(work, tmp_path):
    d, env = work
    t = tmp_path / "a.trace"
    llamalloc("trace", "-o", t, "--", d / "alloc", "1000", env=env, check_rc=0)
    err = _stderr_on_a_terminal(["simulate", t, "-p", "pages-4k", "-p", "mesh", "-o", tmp_path / "s.json"], env)
    assert re.search(r"simulate: +\d+%\|.*\| \d/3 ", err), err
    err = _stderr_on_a_terminal(["prepare", d / "other.model", d / "alloc", "-o", tmp_path / "t.tokens"], env)
    assert re.search(r"prepare: +\d+%\|.*\| \d/\d+ ", err), err
