"""`llamalloc compare` runs a user's own command (or a server and its client) under several allocators
and compares peak, steady-state and final memory and time."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from test_profiler_common import llamalloc

PEAK_C = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char** argv) {
  enum { N = 40000 };
  static char* p[N];
  for (int i = 0; i < N; i++) { p[i] = malloc(256); memset(p[i], 1, 256); }
  usleep(200000);
  for (int i = 0; i < N; i++) { free(p[i]); }
  if (argc > 1) for (;;) pause();  /* a server: runs until stopped */
  usleep(200000);
  return 0;
}
"""


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    (d / "peak.c").write_text(PEAK_C)
    subprocess.run([shutil.which("cc") or "gcc", "-O1", "-o", str(d / "peak"), str(d / "peak.c")], check=True)
    return d / "peak"


def test_compare_a_program_under_three_allocators(prog, tmp_path):
    out = tmp_path / "cmp"
    r = llamalloc("compare", "--allocators", "glibc,jemalloc,llamalloc", "-o", out, "--", prog)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.split()
            and line.split()[0] in ("glibc", "jemalloc", "llamalloc")}
    assert set(rows) == {"glibc", "jemalloc", "llamalloc"}
    assert "peak MiB" in r.stdout and "steady MiB" in r.stdout and "final MiB" in r.stdout
    verdict = [line for line in r.stdout.splitlines() if line.startswith("least memory after the peak: ")]
    assert len(verdict) == 1
    # Three runs each by default: medians and spread, and whether the winner is beyond the spread.
    assert "medians of 3 runs" in r.stdout
    assert "beyond the spread of 3 runs" in verdict[0] or "within the spread of the runs" in verdict[0], verdict
    ours = [line for line in r.stdout.splitlines() if line.startswith("llamalloc: ")]
    assert len(ours) == 1 and "memory after the peak than" in ours[0], r.stdout
    if "more memory" in ours[0]:
        assert "llamalloc trace -o prog.trace --" in ours[0] and "-p llama-oracle" in ours[0]
    # Live progress: each run announced and reported, with an estimate of the time left.
    assert "compare: [9/9] llamalloc run 3/3: " in r.stderr and "s left)" in r.stderr, r.stderr
    doc = json.loads((out / "compare.json").read_text())
    assert [x["allocator"] for x in doc["runs"]] == ["glibc"] * 3 + ["jemalloc"] * 3 + ["llamalloc"] * 3
    assert [x["runs"] for x in doc["summary"]] == [3, 3, 3]
    for x in doc["runs"]:
        assert x["status"] == 0 and x["problem"] is None
        assert x["peak_rss_bytes"] >= 40000 * 256  # the program's peak is seen
        assert x["peak_rss_bytes"] >= x["steady_rss_bytes"]
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_a_server_driven_by_a_client(prog, tmp_path):
    out = tmp_path / "cmp"
    r = llamalloc("compare", "--allocators", "glibc,llamalloc", "--client", "sleep 0.3", "--startup", "0.5",
                  "--repeat", "1", "-o", out, "--", prog, "serve")
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "compare.json").read_text())
    for x in doc["runs"]:
        assert x["problem"] is None, x
        assert x["status"] == 128 + 15  # stopped (SIGTERM) when the client was done: the server never ends itself
        assert x["peak_rss_bytes"] >= 40000 * 256


def test_compare_bad_input_is_one_line(prog, tmp_path):
    r = llamalloc("compare", "--allocators", "glibc,nosuch", "-o", tmp_path / "c", "--", prog)
    assert r.returncode == 2 and r.stderr.startswith("llamalloc: error: --allocators: unknown allocator 'nosuch'")
    r = llamalloc("compare", "--alocators", "glibc", "--", prog)
    assert r.returncode == 2 and "no such option: --alocators (did you mean --allocators?)" in r.stderr


def test_compare_exits_1_and_leaves_nothing_when_no_allocator_runs_the_program_to_the_end(tmp_path):
    out = tmp_path / "cmp"
    r = llamalloc("compare", "--allocators", "glibc,llamalloc", "--repeat", "1", "-o", out, "--",
                  "sh", "-c", "echo cannot open the config >&2; exit 3")
    assert r.returncode == 1, r.stderr
    assert "llamalloc: error: no allocator ran sh to the end" in r.stderr and "cannot open the config" in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists(), list(out.iterdir())


def test_ctrl_c_prints_the_finished_rows_exits_130_and_leaves_nothing(prog, tmp_path):
    import signal
    import sys
    out = tmp_path / "cmp"
    # With the default SIGINT handler: a test run in the background or under nohup ignores SIGINT, and a child
    # inherits that.
    p = subprocess.Popen([sys.executable, "-m", "llamalloc", "compare", "--allocators", "glibc,llamalloc",
                          "--repeat", "3", "-o", str(out), "--", "sleep", "0.5"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    err = ""
    for line in p.stderr:
        err += line
        if "[2/6] llamalloc run 1/3: " in line:
            p.send_signal(signal.SIGINT)
            break
    stdout, rest = p.communicate(timeout=60)
    err += rest
    assert p.returncode == 130, err
    rows = [line.split()[0] for line in stdout.splitlines() if line.split() and line.split()[0] in
            ("glibc", "llamalloc")]
    assert rows[:2] == ["glibc", "llamalloc"], stdout  # the two finished runs
    assert "interrupted after" in err and "Traceback" not in err
    assert not out.exists()


def test_the_plot_has_one_line_per_allocator_and_no_flat_zero_lines():
    from llamalloc import compare
    mib = 1 << 20
    runs = [compare.CompareRun("glibc", r, 0, 1.0, [(0.0, 10 * mib, 0), (0.1, 20 * mib, 0)]) for r in range(3)]
    runs += [compare.CompareRun("llamalloc", r, 0, 1.0, [(0.0, 8 * mib, 2 * mib), (0.1, 9 * mib, 4 * mib)])
             for r in range(3)]
    runs.append(compare.CompareRun("jemalloc", 0, None, None, [], "exited with status 1"))
    series = compare.plot_series(runs)
    assert [name for name, *_ in series] == ["glibc", "llamalloc"]  # one each; nothing for a run with no samples
    glibc, ours = series
    assert glibc[3] is None  # AnonHugePages stayed at zero: not drawn
    assert ours[2] == [8.0, 9.0] and ours[3] == [2.0, 4.0]


def test_bad_input_creates_nothing(tmp_path):
    out = tmp_path / "cmp" / "sub"
    for args, rc, text in ((["--allocators", "glibc,nosuch"], 2, "unknown allocator 'nosuch'"),
                           (["--model", str(tmp_path / "absent.model")], 2, "absent.model: no such file")):
        r = llamalloc("compare", *args, "-o", out, "--", "sleep", "0.1")
        assert r.returncode == rc and r.stderr.startswith("llamalloc: error: ") and text in r.stderr, r.stderr
        assert not (tmp_path / "cmp").exists()
    r = llamalloc("compare", "--allocators", "glibc", "--repeat", "1", "-o", out, "--", tmp_path / "no-such-prog")
    assert r.returncode == 127 and r.stderr.strip().endswith("no-such-prog: command not found"), r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "cmp").exists()  # no folder, and no glibc.log of a run that never started
    # A program that cannot be executed: one line, as a shell's status, before any run is announced.
    script = tmp_path / "not-executable"
    script.write_text("true\n")
    r = llamalloc("compare", "--allocators", "glibc", "--repeat", "1", "-o", out, "--", script, check_rc=None)
    assert r.returncode == 126 and r.stderr == f"llamalloc: error: {script}: permission denied\n", r.stderr
    assert not (tmp_path / "cmp").exists()


def test_an_output_folder_under_a_file_is_refused_before_any_run(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    marker = tmp_path / "ran"
    r = llamalloc("compare", "--allocators", "glibc", "--repeat", "1", "-o", a_file / "cmp", "--", "touch", marker)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"llamalloc: error: {a_file / 'cmp'}: ") and "is not a folder" in r.stderr
    assert not marker.exists()


@pytest.mark.parametrize("existed", [False, True])
def test_a_full_disk_under_the_outputs_is_one_line_and_keeps_what_was_there(tmp_path, capsys, full_disk_figures,
                                                                             existed):
    from conftest import former_output
    from llamalloc.cli import main

    out = tmp_path / "cmp"
    former_output(out, existed, "compare.json", "the former result")
    rc = main(["compare", "--allocators", "glibc", "--repeat", "1", "-o", str(out), "--", "sleep", "0.3"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("llamalloc: ")]
    assert lines == [f"llamalloc: error: cannot write {out / 'compare.png'}: No space left on device; the runs' "
                     f"results are not kept ({out} left as it was)"], err
    if existed:
        assert sorted(p.name for p in out.iterdir()) == ["compare.json"]
        assert (out / "compare.json").read_text() == "the former result"
    else:
        assert not out.exists()


def test_a_full_standard_output_is_one_line_and_the_files_are_written(tmp_path):
    import sys
    out = tmp_path / "cmp"
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "llamalloc", "compare", "--allocators", "glibc", "--repeat", "1",
                            "-o", str(out), "--", "sleep", "0.3"], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == ("llamalloc: error: cannot write the standard output: No space left "
                                                 "on device")
    assert json.loads((out / "compare.json").read_text())["runs"][0]["allocator"] == "glibc"
