"""The allocator's statistics while the program runs: from the program itself (llamalloc_stats_json and
llamalloc_stats_print in include/llamalloc.h), on a signal (LLAMALLOC_STATS_SIGNAL), and `run --stats`'s snapshot
from before the program's teardown (LLAMALLOC_STATS_BEFORE_EXIT: when main returns or exit() is called, before the
static destructors), beside the file at exit."""
from __future__ import annotations

import json
import re
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from llamalloc.paths import native_library

from conftest import llamalloc
from linked_support import build_linked

MIB = 1 << 20
BIG = 64 * MIB

# A static object owns 64 MiB that its destructor frees: live before the teardown, gone at exit. "exit" leaves
# through exit(3) instead of returning from main; "signal" raises the statistics signal itself with the 64 MiB
# live and again after freeing 32 MiB of another object; "wait" runs a thread that keeps allocating and waits for
# a line on stdin (the test signals it from outside meanwhile).
PROG_CC = r"""
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>
struct Big {
  char* p;
  Big() { p = static_cast<char*>(malloc(64 << 20)); memset(p, 1, 64 << 20); }
  ~Big() { free(p); }
};
Big big;
char* volatile more;  // (volatile: the compiler may not drop the allocation)
int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "signal")) {
    more = static_cast<char*>(malloc(32 << 20));
    memset(more, 2, 32 << 20);
    raise(atoi(argv[2]));
    free(more);
    raise(atoi(argv[2]));
  }
  if (!strcmp(mode, "wait")) {
    std::atomic<bool> stop{false};
    std::thread churn([&] {
      while (!stop.load()) { void* q[64]; for (auto& x : q) x = malloc(100); for (auto& x : q) free(x); }
    });
    puts("ready");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 5;
    stop = true;
    churn.join();
  }
  puts("ok");
  fflush(stdout);
  if (!strcmp(mode, "exit")) exit(3);
  return 0;
}
"""


STATS_JSON_PROG = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <llamalloc.h>
int main(void) {
  enum { N = 20000 };
  static void* p[N];
  for (int i = 0; i < N; i++) { p[i] = malloc(512); memset(p[i], 1, 512); }
  char buf[8192];
  size_t n = llamalloc_stats_json(buf, sizeof buf);
  if (n == 0 || n >= sizeof buf) return 3;
  buf[n] = 0;
  printf("%s\n", buf);
  if (llamalloc_stats_json(buf, 10) != 0) return 4;  /* too small: 0, nothing promised */
  llamalloc_stats_print();
  for (int i = 0; i < N; i++) free(p[i]);
  return 0;
}
"""


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hooks")
    (d / "prog.cc").write_text(PROG_CC)
    cxx = shutil.which("c++") or shutil.which("g++")
    subprocess.run([cxx, "-O1", "-pthread", "-o", str(d / "prog"), str(d / "prog.cc")], check=True)
    return d / "prog"


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMALLOC_") or k in ("LLAMALLOC_BUILD_DIR",)}
    env.update(extra)
    return env


def _preloaded(prog: Path, *args, **extra) -> subprocess.CompletedProcess:
    env = _env(LD_PRELOAD=str(native_library("libllamalloc.so")), **extra)
    return subprocess.run([str(prog), *args], capture_output=True, text=True, env=env, timeout=120)


def _llamalloc(*args) -> subprocess.CompletedProcess:
    return llamalloc(*args, env=_env(), check_rc=None)


def test_run_stats_prints_the_summary_line_of_the_file_at_exit(prog, tmp_path):
    stats = tmp_path / "stats.json"
    r = _llamalloc("run", "--stats", stats, "--", prog, "return")
    assert r.returncode == 0, r.stderr
    at_exit = json.loads(stats.read_text())
    before = json.loads((tmp_path / "stats.before-exit.json").read_text())
    # Two lines, each named by its moment: before the teardown (the static object's 64 MiB still live), and at exit.
    for moment, doc in (("before teardown", before), ("at exit", at_exit)):
        lines = [line for line in r.stderr.splitlines() if line.startswith(f"llamalloc: {moment}: live ")]
        assert len(lines) == 1, r.stderr
        m = re.match(rf"llamalloc: {moment}: live ([0-9.]+) MiB \(peak ([0-9.]+)\), footprint ([0-9.]+) MiB",
                     lines[0])
        assert m, lines[0]
        for value, key in zip(m.groups(), ("live_bytes", "peak_live_bytes", "footprint_bytes")):
            assert abs(float(value) - doc[key] / 2**20) <= 0.05, (lines[0], key, doc[key])
    assert before["live_bytes"] >= BIG > at_exit["live_bytes"]
    assert r.stderr.index("llamalloc: before teardown: ") < r.stderr.index("llamalloc: at exit: ")
    # Preloaded with only LLAMALLOC_STATS, the file is written and nothing is printed.
    r = _preloaded(prog, "return", LLAMALLOC_STATS=str(tmp_path / "quiet.json"))
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.parametrize("how, status", [("return", 0), ("exit", 3)])
def test_run_stats_keeps_the_state_before_the_teardown(prog, tmp_path, how, status):
    stats = tmp_path / "stats.json"
    r = _llamalloc("run", "--stats", stats, "--", prog, how)
    assert r.returncode == status, r.stderr
    assert r.stdout == "ok\n"
    before_path = tmp_path / "stats.before-exit.json"
    assert f"before the program's teardown in {before_path}" in r.stderr and f"at exit in {stats}" in r.stderr
    before = json.loads(before_path.read_text())
    at_exit = json.loads(stats.read_text())
    assert before["format"] == at_exit["format"] == "llamalloc-stats"
    # The static destructor has not run yet before the teardown; it has at exit.
    assert before["live_bytes"] >= BIG, before
    assert at_exit["live_bytes"] < BIG // 2, at_exit
    assert at_exit["peak_live_bytes"] >= BIG


def test_no_snapshot_before_exit_unless_asked(prog, tmp_path):
    stats = tmp_path / "s.json"
    r = _preloaded(prog, "return", LLAMALLOC_STATS=str(stats))
    assert r.returncode == 0 and r.stderr == ""
    assert stats.exists() and not (tmp_path / "s.before-exit.json").exists()
    r = _preloaded(prog, "return", LLAMALLOC_STATS=str(tmp_path / "t"), LLAMALLOC_STATS_BEFORE_EXIT="1")
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads((tmp_path / "t.before-exit").read_text())["live_bytes"] >= BIG


@pytest.mark.parametrize("spelling", ["USR1", "SIGUSR1", "usr1", str(int(signal.SIGUSR1))])
def test_signal_writes_the_statistics_of_the_moment(prog, tmp_path, spelling):
    stats = tmp_path / "stats.json"
    r = _preloaded(prog, "signal", str(int(signal.SIGUSR1)), LLAMALLOC_STATS=str(stats),
                   LLAMALLOC_STATS_SIGNAL=spelling)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert r.stderr == ""
    first = json.loads((tmp_path / "stats.signal-1.json").read_text())
    second = json.loads((tmp_path / "stats.signal-2.json").read_text())
    assert first["live_bytes"] >= BIG + 32 * MIB, first
    assert BIG <= second["live_bytes"] < BIG + 32 * MIB, second
    assert json.loads(stats.read_text())["live_bytes"] < BIG // 2


def test_signal_without_a_statistics_file_prints_to_stderr(prog):
    r = _preloaded(prog, "signal", str(int(signal.SIGUSR2)), LLAMALLOC_STATS_SIGNAL="USR2")
    assert r.returncode == 0, r.stderr
    decoder = json.JSONDecoder()
    # Each signal's summary line, then its JSON.
    summaries = [line for line in r.stderr.splitlines() if line.startswith("llamalloc: live ")]
    assert len(summaries) == 2, r.stderr
    text = "\n".join(line for line in r.stderr.splitlines() if not line.startswith("llamalloc: live ")).strip()
    first, end = decoder.raw_decode(text)
    second, _ = decoder.raw_decode(text[end:].lstrip())
    assert first["live_bytes"] >= BIG + 32 * MIB and second["live_bytes"] < BIG + 32 * MIB


def test_signal_from_outside_while_another_thread_allocates(prog, tmp_path):
    """kill -USR1 while a thread keeps the heap busy: a file per signal, and the program goes on (no hang)."""
    stats = tmp_path / "stats.json"
    env = _env(LD_PRELOAD=str(native_library("libllamalloc.so")), LLAMALLOC_STATS=str(stats),
               LLAMALLOC_STATS_SIGNAL="USR1")
    p = subprocess.Popen([str(prog), "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        assert p.stdout.readline() == "ready\n"
        for n in (1, 2, 3):
            p.send_signal(signal.SIGUSR1)
            out = tmp_path / f"stats.signal-{n}.json"
            deadline = time.monotonic() + 60  # a bound on the wait, not a measurement
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert out.exists(), f"no {out.name} after SIGUSR1"
            assert json.loads(out.read_text())["live_bytes"] >= BIG
        out, err = p.communicate("go\n", timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0 and out == "ok\n", err
    assert err == ""


@pytest.mark.parametrize("value", ["KILL", "SEGV", "NOPE", "0", "99"])
def test_a_bad_signal_is_one_warning_and_the_program_runs(prog, value):
    r = _preloaded(prog, "return", LLAMALLOC_STATS_SIGNAL=value)
    assert r.returncode == 0 and r.stdout == "ok\n"
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llamalloc: warning: LLAMALLOC_STATS_SIGNAL={value} "), r.stderr


def test_stats_json_and_print_while_running(tmp_path):
    exe = build_linked(tmp_path, STATS_JSON_PROG, "s")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    now = json.loads(r.stdout)
    summary, _, rest = r.stderr.partition("\n")  # llamalloc_stats_print: the summary line, then the JSON
    printed = json.loads(rest)
    live_mib = float(re.match(r"llamalloc: live ([0-9.]+) MiB", summary).group(1))
    assert abs(live_mib - printed["live_bytes"] / 2**20) <= 0.05, summary
    assert f"pages by class {' '.join(map(str, printed['huge_pages_by_class']))}," in summary, summary
    for doc in (now, printed):
        assert doc["footprint_bytes"] >= 20000 * 512
        assert doc["live_bytes"] >= 20000 * 512 - 2 * 256 * 1024


def test_run_stats_where_no_file_can_be_written_is_one_line_before_the_program_starts(tmp_path):
    marker = tmp_path / "ran"
    # /proc takes no new file, whatever the permission bits say to root.
    for stats in (Path("/proc/llamalloc-stats.json"), tmp_path / "missing" / "stats.json"):
        r = _llamalloc("run", "--stats", stats, "--", "touch", marker)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert lines[0].startswith(f"llamalloc: error: --stats {stats}: "), lines
        assert not marker.exists(), "the program ran"


@pytest.mark.parametrize("how, status", [("return", 0), ("exit", 3)])
def test_the_summary_alone_gives_the_state_before_the_teardown_and_at_exit(prog, how, status):
    r = _preloaded(prog, how, LLAMALLOC_STATS_SUMMARY="1")
    assert r.returncode == status and r.stdout == "ok\n", r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 2, r.stderr
    live = []
    for moment, line in zip(("before teardown", "at exit"), lines):
        m = re.match(rf"llamalloc: {moment}: live ([0-9.]+) MiB \(peak [0-9.]+\), footprint ", line)
        assert m, r.stderr
        live.append(float(m.group(1)) * MIB)
    # The static object's 64 MiB are live before the teardown, and freed by its destructor at exit.
    assert live[0] >= BIG > live[1], r.stderr


@pytest.fixture
def full_disk(tmp_path):
    """A folder on a file system of 64 KiB (a tmpfs): the test fills it. Mounting needs root."""
    folder = tmp_path / "small"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                      capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def _fill(folder: Path) -> None:
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_run_stats_on_a_full_disk_is_one_line_before_the_program_starts(full_disk, tmp_path):
    _fill(full_disk)
    marker = tmp_path / "ran"
    stats = full_disk / "stats.json"
    r = _llamalloc("run", "--stats", stats, "--", "touch", marker)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and lines == [f"llamalloc: error: --stats {stats}: cannot write in folder {full_disk}: "
                                           "No space left on device"], r.stderr
    assert not marker.exists(), "the program ran"
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


def test_a_disk_that_fills_during_the_run_is_named_instead_of_the_program(full_disk):
    stats = full_disk / "stats.json"
    r = _llamalloc("run", "--stats", stats, "--", "dd", "if=/dev/zero", f"of={full_disk / 'filler'}", "bs=4k")
    assert r.returncode == 1, r.stderr  # (dd's own status: it filled the disk)
    last = r.stderr.strip().splitlines()[-1]
    assert last == (f"llamalloc: warning: no statistics were written to {stats}: cannot write in folder {full_disk}: "
                    "No space left on device"), r.stderr
    assert "killed" not in r.stderr
