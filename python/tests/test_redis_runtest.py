"""redis's own test suite with the server under libllamalloc.so.

workloads/redis/runtest.sh runs `./runtest` of the Debian source package that workloads/redis/build.sh builds
(redis 7.0.15, MALLOC=libc), with src/redis-server a stand-in that execs the cached binary under
LD_PRELOAD=libllamalloc.so (argv[0] kept). Every failure fails this test except the environment failures listed
below, each of which fails the same way with no LD_PRELOAD (glibc). See docs/testing.md for the counts."""
from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path


from llamalloc import paths
from test_workloads_support import llamalloc_library, preload_env

# The units run (about 2 minutes on 2 cores, 4 test clients). unit/memefficiency, unit/type/*, unit/expire,
# unit/info and unit/keyspace as the issue asks; the rest exercise allocation-heavy paths (DUMP/RESTORE, SORT,
# SCAN, eviction under maxmemory with used_memory from malloc_usable_size, lazy free on a background thread,
# scripting, AOF rewrite in a forked child, client eviction, ...).
UNITS = [
    "unit/memefficiency", "unit/type/hash", "unit/type/incr", "unit/type/list", "unit/type/list-2",
    "unit/type/list-3", "unit/type/set", "unit/type/stream", "unit/type/stream-cgroups", "unit/type/string",
    "unit/type/zset", "unit/expire", "unit/info", "unit/keyspace",
    "unit/dump", "unit/sort", "unit/scan", "unit/maxmemory", "unit/lazyfree", "unit/bitops", "unit/scripting",
    "unit/other", "unit/multi", "unit/querybuf", "unit/client-eviction", "unit/introspection", "unit/functions",
    "unit/bitfield", "unit/aofrw",
]

# Failures that are not the allocator's: each fails the same way when the server runs on glibc (no preload).
KNOWN_ENVIRONMENT_FAILURES = {
    # Debian's security patches (debian/patches/*CVE*) make RESTORE reject the bad payload earlier, with
    # "ERR DUMP payload version or checksum are wrong" where the upstream test expects "Bad data format".
    "RESTORE fail with invalid payload size in tests/unit/dump.tcl",
}

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def runtest_script() -> Path:
    root = paths.repo_root()
    assert root is not None, "needs a source checkout (workloads/redis/runtest.sh)"
    return root / "workloads" / "redis" / "runtest.sh"


def parse(output: str) -> tuple[list[str], list[str], list[str]]:
    """(passed, failed, exceptions) test names from runtest's output."""
    passed, failed, exceptions = [], [], []
    for line in ANSI.sub("", output).splitlines():
        if m := re.match(r"\[ok\]: (.*) \(\d+ ms\)$", line):
            passed.append(m.group(1))
        elif m := re.match(r"\[err\]: (.*)$", line):
            failed.append(m.group(1))
        elif m := re.match(r"\[(exception|timeout)\]: (.*)$", line):
            exceptions.append(m.group(2))
    return passed, failed, exceptions


def check_stand_in_preloads(run_dir: Path, lib: Path) -> None:
    """The stand-in src/redis-server that runtest used runs the server with libllamalloc.so mapped."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(run_dir / "src" / "redis-server"), "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--dir", str(run_dir)], env=preload_env(None),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        maps = ""
        for _ in range(100):
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
            if str(lib.resolve()) in maps:
                break
            time.sleep(0.05)
        assert str(lib.resolve()) in maps, "the stand-in's redis-server does not have libllamalloc.so mapped"
        assert "redis-server" in Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    finally:
        proc.kill()
        proc.wait()


def passes_alone(name: str, lib: Path, tmp_path: Path) -> bool:
    """Runs one failed test ("NAME in tests/unit/FILE.tcl") again, alone, under llamalloc."""
    m = re.fullmatch(r"(.+) in tests/(unit/[\w/-]+)\.tcl", name)
    if not m:
        return False
    r = subprocess.run(["bash", str(runtest_script()), "--preload", str(lib), "--dir",
                        str(tmp_path / f"again-{abs(hash(name))}"), "--", "--single", m.group(2), "--only", m.group(1),
                        "--clients", "1", "--timeout", "600"],
                       env=preload_env(None), capture_output=True, text=True, timeout=900)
    passed, failed, exceptions = parse(r.stdout + r.stderr)
    return m.group(1) in passed and not failed and not exceptions


def test_redis_runtest_under_llamalloc(tmp_path):
    lib = llamalloc_library()
    args = [a for unit in UNITS for a in ("--single", unit)]

    def run(run_dir: Path):
        r = subprocess.run(["bash", str(runtest_script()), "--preload", str(lib), "--dir", str(run_dir), "--",
                            *args, "--clients", "4", "--timeout", "600"],
                           env=preload_env(None), capture_output=True, text=True, timeout=1800)
        out = r.stdout + r.stderr
        (tmp_path / f"runtest-{run_dir.name}.log").write_text(out)
        return r, out, *parse(out)

    run_dir = tmp_path / "run"
    r, out, passed, failed, exceptions = run(run_dir)
    if exceptions:
        # A test that races the server against the clock can fail on busy cores and leave the server set up to
        # evict clients (client-eviction's "percentage of maxmemory" test: the client is still connected when the
        # test looks, then the suite's own client is evicted). runtest stops there, so the
        # whole suite runs once more; a second exception fails the test.
        first = exceptions
        run_dir = tmp_path / "run-again"
        r, out, passed, failed, exceptions = run(run_dir)
        exceptions = [f"{e} (the first run stopped on {first})" for e in exceptions]
    tail = ANSI.sub("", out)[-4000:]
    assert not exceptions, f"runtest stopped on an exception or timeout: {exceptions}\n{tail}"
    done = set(re.findall(r"\[\d+/\d+ done\]: (\S+) ", ANSI.sub("", out)))
    assert set(UNITS) <= done, f"units that did not finish: {sorted(set(UNITS) - done)}\n{tail}"
    unexpected = [f for f in failed if f not in KNOWN_ENVIRONMENT_FAILURES]
    details = "\n".join(line for line in ANSI.sub("", out).splitlines()
                        if line.startswith(("[err]", "Expected", "*** [err]")))
    # A few of redis's tests race the server against the clock (client-eviction's output-buffer test failed once
    # in a CI run with 4 test clients on 2 busy cores, and passed alone every time): each unexpected failure is run
    # again, alone, and fails this test only if it fails again.
    again = [f for f in unexpected if not passes_alone(f, lib, tmp_path)]
    assert not again, (f"redis tests that fail under llamalloc, also when run again alone (not known environment "
                       f"failures): {again}\n{details}")
    # Every test ran: a run that silently skipped most of the suite is not a pass.
    assert len(passed) >= 1800, f"only {len(passed)} redis tests passed\n{tail}"
    if r.returncode != 0:
        assert failed, f"runtest exited with {r.returncode} and no failed test\n{tail}"
    check_stand_in_preloads(run_dir, lib)


def test_the_known_environment_failures_are_named_exactly():
    """Each known failure is one runtest prints ("NAME in tests/unit/FILE.tcl"), in a unit that is run."""
    for name in KNOWN_ENVIRONMENT_FAILURES:
        m = re.fullmatch(r".+ in tests/(unit/[\w/-]+)\.tcl", name)
        assert m and m.group(1) in UNITS, name
