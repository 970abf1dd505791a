"""Each workload at small scale under glibc and under llamalloc checks its own output."""
from __future__ import annotations


import pytest

from llamalloc import workloads
from test_workloads_support import is_real_llamalloc, llamalloc_library, preload_env

ALLOCATORS = ["glibc", "llamalloc"]


def _env(allocator: str, **extra: str) -> dict[str, str]:
    return preload_env(None if allocator == "glibc" else llamalloc_library(), **extra)


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_image_server_answers_every_request_with_the_expected_images(allocator, tmp_path):
    pids = []
    result = workloads.get("image-server").run("small", _env(allocator), tmp_path, on_start=pids.append)
    assert pids, "the measured process was reported"
    assert result["errors"] == 0 and result["requests"] == 240
    # The checksum covers every response body in request order; each body was already checked by the client
    # against the server's X-Checksum header.
    assert result["checksum"] == workloads.IMAGE_SERVER_CHECKSUMS["small"]
    assert 0 < result["large_requests"] < result["requests"]
    server = result["server"]
    assert server["sessions"] > 0 and server["stat_keys"] > 0 and server["cluster_nodes"] > 0


def test_image_server_revision_2_renders_the_same_images(tmp_path):
    result = workloads.get("image-server-r2").run("small", _env("glibc"), tmp_path)
    assert result["revision"] == 2
    assert result["checksum"] == workloads.IMAGE_SERVER_CHECKSUMS["small"]


def test_image_server_rejects_bad_options(tmp_path):
    import subprocess
    exe = workloads.get("image-server").executable()
    out = subprocess.run([str(exe), "--scale", "huge"], capture_output=True, text=True)
    assert out.returncode == 2
    assert "--scale" in out.stderr.splitlines()[0]


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_word_count_counts_match_an_independent_recount(allocator, tmp_path):
    corpus = tmp_path / "corpus.txt"
    result = workloads.get("word-count").run("small", _env(allocator), tmp_path,
                                             extra_args=["--dump-corpus", str(corpus)])
    expected = workloads.word_count_expected(corpus)
    assert result["words"] == expected["words"] == 320000
    assert result["distinct_words"] == expected["distinct_words"]
    assert result["checksum"] == expected["checksum"]
    assert result["top"] == expected["top"]


def test_word_count_revision_2_gives_the_same_counts(tmp_path):
    r1 = workloads.get("word-count").run("small", _env("glibc"), tmp_path)
    r2 = workloads.get("word-count-r2").run("small", _env("glibc"), tmp_path)
    assert r2["revision"] == 2 and r1["revision"] == 1
    assert (r1["checksum"], r1["top"], r1["words"]) == (r2["checksum"], r2["top"], r2["words"])


def test_word_count_recount_is_independent(tmp_path):
    # The Python recount itself, on a text small enough to count by hand.
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat, the DOG.\nthe cat\n")
    expected = workloads.word_count_expected(corpus, top=2)
    assert expected["words"] == 6 and expected["distinct_words"] == 3
    assert expected["top"] == [["the", 3], ["cat", 2]]


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_frag_micro_reports_its_live_objects_and_footprints(allocator, tmp_path):
    result = workloads.get("frag-micro").run("small", _env(allocator), tmp_path)
    assert result["ok"] is True
    assert result["long_lived_objects"] == result["allocations"] // 10000
    assert result["live_bytes"] == result["long_lived_objects"] * result["long_lived_object_bytes"]
    # Lower bounds from the addresses: 4 KiB pages cover the live bytes, 2 MiB pages cover the 4 KiB pages.
    assert result["live_bytes"] <= result["footprint4k_bytes"] <= result["footprint_bytes"]
    assert result["footprint_bytes"] % (2 << 20) == 0 and result["footprint4k_bytes"] % 4096 == 0
    assert result["rss_bytes"] > result["live_bytes"]
    if allocator == "llamalloc" and is_real_llamalloc(llamalloc_library()):
        assert result["long_lived_placement"] == "llamalloc_malloc_class"
        assert result["long_lived_class"] == 7
    elif allocator == "glibc":
        assert result["long_lived_placement"] == "malloc"


@pytest.mark.parametrize("allocator", ALLOCATORS)
def test_redis_benchmark_runs_without_errors(allocator, tmp_path):
    pids = []
    result = workloads.get("redis").run("small", _env(allocator), tmp_path, on_start=pids.append)
    assert pids
    assert result["allocator"] == "libc"  # built with MALLOC=libc, so LD_PRELOAD decides the allocator
    assert result["value_bytes"] == 1000 and result["clients"] >= 50
    assert set(result["per_test_requests_per_second"]) >= {"fill.SET", "fill.GET", "refill.SET"}
    assert all(v > 0 for v in result["per_test_requests_per_second"].values())
    assert result["keys_at_end"] > 0


def test_unknown_workload_is_a_user_error():
    from llamalloc.errors import UserError
    with pytest.raises(UserError, match="unknown workload 'nope'"):
        workloads.get("nope")
