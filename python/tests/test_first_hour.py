"""What a new user meets in the first hour: options refused before the program runs, output folders checked
before the work, and the other checks that keep a mistake from costing a long run."""
from __future__ import annotations

import subprocess

from conftest import llamalloc


def test_run_refuses_a_misspelled_option_or_a_bad_value_before_the_program_starts(tmp_path):
    marker = tmp_path / "ran"
    r = llamalloc("run", "--option", "CLASES=4", "--", "touch", marker, check_rc=2)
    assert r.stderr.strip() == ("llamalloc: error: --option CLASES=4: LLAMALLOC_CLASES is not a llamalloc option "
                                "(did you mean LLAMALLOC_CLASSES?)")
    r = llamalloc("run", "--option", "classes=9", "--", "touch", marker, check_rc=2)
    assert "--option CLASSES=9" in r.stderr and "[2, 8]" in r.stderr and len(r.stderr.splitlines()) == 1
    assert not marker.exists(), "the program ran"
    llamalloc("run", "--option", "classes=4", "--", "touch", marker)
    assert marker.exists()
    # Every option of the library is taken, those the replay takes as flags of its own too.
    llamalloc("run", "--option", f"PREDICT_LOG={tmp_path / 'log'}", "--option", "SWEEP_MS=100", "--", "true")


def test_trace_to_parquet_checks_its_output_folder_before_it_reads_the_trace(tmp_path):
    # A trace that does not exist: the missing output folder is what is reported, so it was checked first.
    r = llamalloc("trace", "--to-parquet", tmp_path / "absent.trace", "-o", tmp_path / "missing" / "x.parquet",
                  check_rc=2)
    assert r.stderr.strip() == f"llamalloc: error: {tmp_path / 'missing'}: no such directory (for -o " \
                               f"{tmp_path / 'missing' / 'x.parquet'})"


def test_the_build_tree_has_a_pkg_config_file_that_links_in_place(tmp_path):
    from llamalloc import paths
    folder = paths.build_dir() / "src" / "llamalloc"
    src = tmp_path / "prog.c"
    src.write_text('#include <llamalloc.h>\n#include <stdio.h>\n#include <stdlib.h>\n'
                   'int main(void) { void *p = malloc(100); char b[8192];\n'
                   '  size_t n = llamalloc_stats_json(b, sizeof b); free(p);\n'
                   '  printf("%s\\n", n > 0 && b[0] == 123 ? "llamalloc" : "other"); return 0; }\n')
    env = dict(__import__("os").environ, PKG_CONFIG_PATH=str(folder))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "llamalloc"], capture_output=True, text=True,
                           env=env, check=True).stdout.split()
    exe = tmp_path / "prog"
    subprocess.run(["cc", str(src), *flags, "-o", str(exe)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "llamalloc"  # the header and the library found, the library at run time too


def test_record_symbolizes_its_profile_so_that_train_takes_it_at_once(tmp_path):
    from llamalloc import paths, profile
    prog = paths.build_dir() / "tests" / "model" / "predict-contexts"
    symbolized, bare = tmp_path / "s.prof", tmp_path / "b.prof"
    r = llamalloc("record", "--sample-bytes", "1", "-o", symbolized, "--", prog, "footprint", 5)
    assert "addresses symbolized" in r.stderr and f"next: llamalloc train {symbolized}" in r.stderr, r.stderr
    assert profile.load(symbolized).symbolized
    # train takes it as it is, and names its objects as estimated from the allocations the profiler sampled.
    r = llamalloc("train", symbolized, "-o", tmp_path / "s.model", "--holdout", "0", "--hidden", "16", "--epochs",
                  "1")
    n = profile.sampled_allocations(symbolized)
    assert n and f"objects (estimated from {n:,} sampled allocations)" in r.stderr, r.stderr
    r = llamalloc("record", "--no-symbolize", "--sample-bytes", "1", "-o", bare, "--", prog, "footprint", 5)
    assert f"next: llamalloc symbolize {bare}" in r.stderr, r.stderr
    assert not profile.load(bare).symbolized


def test_top_lists_what_stays_live_by_call_site_from_a_profile_and_a_trace(tmp_path):
    from llamalloc import paths
    prog = paths.build_dir() / "tests" / "model" / "predict-contexts"
    prof, trace = tmp_path / "f.prof", tmp_path / "f.trace"
    llamalloc("record", "--sample-bytes", "1", "-o", prof, "--", prog, "footprint", 10)
    llamalloc("trace", "-o", trace, "--", prog, "footprint", 10)
    llamalloc("symbolize", trace)
    for f, pages in ((prof, False), (trace, True)):
        r = llamalloc("top", f)
        # footprint keeps a 256-byte record per 200 buffers, never freed: 200 records from keep_record, and the
        # buffers (freed) are not live.
        rows = [line for line in r.stdout.splitlines() if "keep_record (predict_contexts.c:" in line]
        assert len(rows) == 1, r.stdout
        assert " 200 " in rows[0] and " never " in rows[0], rows[0]
        assert not any("temp_buffer" in line or "handle_request (" in line for line in r.stdout.splitlines())
        assert ("huge pages" in r.stdout.splitlines()[0]) == pages, r.stdout
    r = llamalloc("top", prof, "--at", "1", check_rc=2)
    assert r.stderr.startswith("llamalloc: error: --at applies to a trace") and len(r.stderr.splitlines()) == 1
    r = llamalloc("top", trace, "--at", "0")  # before anything was allocated: nothing live
    assert r.stdout.startswith("0.0 MiB live in 0 objects"), r.stdout


def test_trace_and_a_dense_record_say_what_their_lifetimes_are_measured_on(tmp_path):
    from llamalloc import paths
    prog = paths.build_dir() / "tests" / "model" / "predict-contexts"
    r = llamalloc("trace", "-o", tmp_path / "t.trace", "--", prog, "footprint", 2)
    assert "the tracer slows allocating code" in r.stderr and "program's own" in r.stderr, r.stderr
    r = llamalloc("record", "--sample-bytes", "1", "--no-symbolize", "-o", tmp_path / "p.prof", "--", prog,
                  "footprint", 2)
    assert "lifetimes are on the program's own clock" in r.stderr, r.stderr
    r = llamalloc("record", "--no-symbolize", "-o", tmp_path / "q.prof", "--", prog, "footprint", 2)
    assert "program's own clock" not in r.stderr  # the default sampling costs little
