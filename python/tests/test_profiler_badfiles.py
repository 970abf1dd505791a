"""Truncated, corrupt, foreign and other-version files: one line naming the file, exit status 2, nothing
written."""
from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest

from llamalloc import profile, trace
from llamalloc.errors import FormatError
from llamalloc.proto import profile_pb2
from test_profiler_common import llamalloc

FIXTURE = Path(__file__).parent / "data" / "prof_sites.prof"


def make_bad(tmp_path: Path, kind: str) -> Path:
    good = FIXTURE.read_bytes()
    p = tmp_path / f"bad-{kind}"
    if kind == "empty":
        p.write_bytes(b"")
    elif kind == "text":
        p.write_text("hello, this is not a profile\n")
    elif kind == "truncated-profile":
        p.write_bytes(good[: len(good) // 2])
    elif kind == "corrupt-profile":
        p.write_bytes(gzip.compress(b"\xff\xff\xff garbage that is not protobuf \x00\x01"))
    elif kind == "foreign-profile":
        m = profile_pb2.Profile()
        m.string_table.extend(["", "samples", "count"])
        vt = m.sample_type.add()
        vt.type, vt.unit = 1, 2
        p.write_bytes(gzip.compress(m.SerializeToString()))
    elif kind == "other-version-profile":
        m = profile.load_proto(FIXTURE)
        for i, s in enumerate(m.string_table):
            if s == "llamalloc-profile v1":
                m.string_table[i] = "llamalloc-profile v2"
        p.write_bytes(gzip.compress(m.SerializeToString()))
    elif kind in ("truncated-trace", "other-version-trace", "corrupt-trace"):
        t = tmp_path / "good.trace"
        llamalloc("trace", "--no-compress", "-o", t, "--", "true", check_rc=0)  # the record format's bytes
        data = bytearray(t.read_bytes())
        if kind == "truncated-trace":
            data = data[: len(data) - 20]
        elif kind == "other-version-trace":
            struct.pack_into("<I", data, 8, 9)
        else:
            struct.pack_into("<I", data, 64, 777)  # the first record's type
        p.write_bytes(bytes(data))
    elif kind == "directory":
        p.mkdir()
    elif kind == "missing":
        pass
    return p


KINDS = ["empty", "text", "truncated-profile", "corrupt-profile", "foreign-profile", "other-version-profile",
         "truncated-trace", "other-version-trace", "corrupt-trace", "directory", "missing"]


@pytest.mark.parametrize("kind", KINDS)
def test_symbolize_rejects_bad_file(tmp_path, kind):
    bad = make_bad(tmp_path, kind)
    out = tmp_path / "out"
    r = llamalloc("symbolize", bad, "-o", out)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llamalloc: error: {bad}"), r.stderr
    assert "Traceback" not in r.stderr and not out.exists()
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith(".")) == []


@pytest.mark.parametrize("kind", ["empty", "text", "truncated-trace", "other-version-trace", "corrupt-trace",
                                  "truncated-profile", "missing"])
def test_to_parquet_rejects_bad_file(tmp_path, kind):
    bad = make_bad(tmp_path, kind)
    out = tmp_path / "out.parquet"
    r = llamalloc("trace", "--to-parquet", bad, "-o", out)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llamalloc: error: {bad}"), r.stderr
    assert not out.exists()


@pytest.mark.parametrize("kind", ["empty", "text", "truncated-profile", "corrupt-profile", "foreign-profile",
                                  "other-version-profile", "truncated-trace", "directory", "missing"])
def test_profile_load_raises_format_error(tmp_path, kind):
    bad = make_bad(tmp_path, kind)
    with pytest.raises(FormatError) as e:
        profile.load(bad)
    assert e.value.path == str(bad)
    if kind == "other-version-profile":
        assert "version 2" in e.value.problem
    if kind == "foreign-profile":
        assert "not a llamalloc profile" in e.value.problem


def test_trace_reader_rejects_a_profile_and_the_profile_reader_a_trace(tmp_path):
    with pytest.raises(FormatError, match="not a llamalloc"):
        trace.load(FIXTURE)
    t = make_bad(tmp_path, "truncated-trace")
    with pytest.raises(FormatError, match="truncated"):
        trace.load(t)
