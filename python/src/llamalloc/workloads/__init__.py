"""The bundled workloads and the corpus of program shapes (docs/workloads.md): how to run each one at a scale
and how to check its output.

Each workload runs as one process whose memory is the thing measured (for redis: redis-server; its client
redis-benchmark runs without the allocator under test; for cpython and sqlite: the interpreter and the sqlite3
shell). `Workload.run` starts it with the given environment
(LD_PRELOAD and friends), reports the pid to sample through `on_start`, waits, checks the output and returns
the workload's own figures. A workload that cannot run raises `WorkloadMissing`; one whose output is wrong
raises `WorkloadFailed`.

The modules, top to bottom (each imports only those below it): `catalog` (the workloads by name, `get`,
`expand`), then one per kind of workload, `program` (the programs built by CMake), `redis`, `cpython` and
`sqlite`, then `quiet` (a program's memory and its quiet phase sampled from outside) and `base` (the scales,
the errors, the result line). This package re-exports their public names: callers import `llamalloc.workloads`.
"""
from __future__ import annotations

# Re-exported: the public API of llamalloc.workloads. Callers also find native binaries through workloads.paths,
# and the tests a free port through workloads._free_loopback_port.
from .. import paths  # noqa: F401
from .base import (  # noqa: F401
    QUIET_INTERVAL_SECONDS, QUIET_SECONDS, SCALES, TIMEOUT_SECONDS, OnStart, WorkloadFailed, WorkloadMissing)
from .catalog import (  # noqa: F401
    DEFAULT_WORKLOADS, GROUPS, IMAGE_SERVER_CHECKSUMS, SHAPES, WORKLOADS, AnyWorkload, expand, get, temporary_workdir,
    word_count_expected)
from .cpython import CPythonWorkload, run_marked_program  # noqa: F401
from .program import Workload  # noqa: F401
from .quiet import (  # noqa: F401
    REDIS_STATS_SIGNAL, STATS_SIGNAL, read_smaps_rollup, read_vm_hwm, sample_quiet_phase, stats_signal_env)
from .redis import RedisWorkload, _free_loopback_port  # noqa: F401
from .sqlite import SqliteWorkload  # noqa: F401
