"""A synthetic fleet: copies of recorded profiles as if recorded on many hosts, builds and days, for the
aggregation's benchmark (bench/fleet/run.py) and tests.

A copy keeps the profile's stacks and changes what a fleet varies: the host comment, the build id of the program's
mapping (mapping 0), the start time, and the counts (every sample's values scaled by one factor, as a host that
served more or less traffic would have them).
"""
from __future__ import annotations

import gzip
import random
from pathlib import Path

from .. import profile


def variant(base, host: str, build_id: str | None, time_ns: int, scale: float) -> bytes:
    """The gzipped bytes of a copy of `base` (a profile_pb2.Profile) recorded on `host`, of build `build_id` (None:
    the base's), starting at `time_ns`, with every count scaled by `scale`."""
    p = type(base)()
    p.CopyFrom(base)
    strings = p.string_table

    def add(s: str) -> int:
        strings.append(s)
        return len(strings) - 1

    comments = [c for c in p.comment if not strings[c].startswith(profile.HOST_COMMENT)]
    del p.comment[:]
    p.comment.extend(comments)
    p.comment.append(add(f"{profile.HOST_COMMENT}{host}"))
    if build_id is not None and len(p.mapping):
        p.mapping[0].build_id = add(build_id)
    p.time_nanos = time_ns
    if scale != 1.0:
        for s in p.sample:
            values = [max(0, int(round(v * scale))) for v in s.value]
            if values[0] == 0:  # a sample keeps at least one object
                values = list(s.value)
            del s.value[:]
            s.value.extend(values)
    return gzip.compress(p.SerializeToString(), compresslevel=1, mtime=0)


def write_fleet(bases: list, out: Path, count: int, hosts: int, builds: int, seed: int = 0,
                start_ns: int = 1_790_000_000_000_000_000) -> list[Path]:
    """`count` profiles under out/HOST/, made from `bases` (paths of recorded profiles) in turn: `hosts` hosts,
    `builds` build ids per program, one day of start times, counts scaled by 0.5 to 2."""
    rng = random.Random(seed)
    protos = [profile.load_proto(b) for b in bases]
    written = []
    for i in range(count):
        base = protos[i % len(protos)]
        host = f"host-{rng.randrange(hosts):05d}"
        build = f"{rng.randrange(builds):08x}" + "0" * 32
        data = variant(base, host, build, start_ns + rng.randrange(86_400) * 1_000_000_000,
                       rng.uniform(0.5, 2.0))
        folder = out / host
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"p{i:07d}.prof"
        path.write_bytes(data)
        written.append(path)
    return written
