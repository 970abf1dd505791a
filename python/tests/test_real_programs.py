"""Real programs under LD_PRELOAD=libllamalloc.so, each checked for correct output.

These FAIL when libllamalloc.so is missing: the allocator is what they test."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from llamalloc import workloads
from test_workloads_support import llamalloc_library, preload_env


@pytest.fixture(scope="module")
def lib() -> Path:
    return llamalloc_library()


def test_the_library_is_really_preloaded(lib):
    out = subprocess.run([sys.executable, "-c", "print(open('/proc/self/maps').read())"],
                         env=preload_env(lib), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert str(lib.resolve()) in out.stdout or str(lib) in out.stdout


def test_git_on_a_local_repository(lib, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = preload_env(lib, HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="T", GIT_AUTHOR_EMAIL="t@x",
                      GIT_COMMITTER_NAME="T", GIT_COMMITTER_EMAIL="t@x", GIT_AUTHOR_DATE="2024-01-01T00:00:00Z",
                      GIT_COMMITTER_DATE="2024-01-01T00:00:00Z")
    repo = tmp_path / "repo"

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"git {' '.join(args)}: {out.stderr}"
        return out.stdout

    repo.mkdir()
    git("init", "-q", "-b", "main")
    for i in range(30):
        (repo / f"file{i % 7}.txt").write_text("".join(f"line {j} of revision {i}\n" for j in range(200 + i)))
        git("add", "-A")
        git("commit", "-q", "-m", f"revision {i}")
    log = git("log", "--format=%s")
    assert log.splitlines() == [f"revision {i}" for i in reversed(range(30))]
    diff = git("diff", "HEAD~7", "HEAD", "--", "file1.txt")
    assert "+line 228 of revision 29" in diff and "-line 0 of revision 22" in diff
    assert "file1.txt" in git("diff", "--stat", "HEAD~1", "HEAD")
    git("gc", "-q", "--aggressive")
    git("fsck", "--strict")
    assert git("rev-list", "--count", "HEAD").strip() == "30"
    assert git("show", "HEAD~29:file0.txt").startswith("line 0 of revision 0\n")


def test_redis_server_under_redis_benchmark(lib, tmp_path):
    redis = workloads.get("redis")
    server = redis.executable()
    port = workloads._free_loopback_port()
    client_env = preload_env(None)
    proc = subprocess.Popen([str(server), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path), "--logfile", str(tmp_path / "log")],
                            env=preload_env(lib), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def cli(*args: str, stdin: str | None = None) -> str:
        out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args], input=stdin,
                             env=client_env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.rstrip("\n")

    try:
        for _ in range(200):
            if proc.poll() is not None:
                pytest.fail(f"redis-server exited at start: {proc.stderr.read()}")
            if subprocess.run(["redis-cli", "-p", str(port), "ping"], env=client_env, capture_output=True,
                              text=True).stdout.strip() == "PONG":
                break
            time.sleep(0.05)
        bench = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-d", "1000", "-c", "50",
                                "-n", "20000", "-r", "5000", "-P", "8", "-t", "set,get,lpush,lrange_100,hset",
                                "--csv"], env=client_env, capture_output=True, text=True, timeout=300)
        assert bench.returncode == 0 and "error" not in (bench.stdout + bench.stderr).lower(), bench.stdout + bench.stderr
        tests = [line.split(",")[0].strip('"') for line in bench.stdout.splitlines()[1:]]
        assert {"SET", "GET", "LPUSH", "HSET", "LRANGE_100 (first 100 elements)"} <= set(tests), tests
        assert cli("set", "k", "v" * 1000) == "OK"
        assert cli("get", "k") == "v" * 1000
        big = "".join(chr(97 + (i * 7) % 26) for i in range(5 << 20))  # larger than a 2 MiB huge page
        assert cli("-x", "set", "big", stdin=big) == "OK"
        assert cli("strlen", "big") == str(len(big))
        assert cli("getrange", "big", "3000000", "3000019") == big[3000000:3000020]
        assert cli("get", "big") == big
        assert int(cli("dbsize")) > 2
        cli("shutdown", "nosave")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_threaded_cpp_program_with_cross_thread_frees(lib):
    exe = workloads.paths.native_binary("workloads/mt-check/mt-check")
    out = subprocess.run([str(exe), "6", "5", "12000"], env=preload_env(lib), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "mt-check: ok messages=72000 producers=6 consumers=5"
