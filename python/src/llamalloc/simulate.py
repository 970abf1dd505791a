"""The trace simulator from Python: runs the native replay engine (`llamalloc-sim`, src/sim) and reads its
results. docs/simulator.md describes the policies and both output files:

- ``NAME.json``: {"format": "llamalloc-sim", "version": 1, "trace", "interval_ns", "seed", "timeline_csv",
  "policies": [{"policy", "summary": {...}, "extras": {...}, optional "snapshots": [...], "heap_options": {...},
  "search": {...} (llama-oracle-best)}]}
- ``NAME.timeline.csv``: one row per policy and sample: policy, time_ns, live_bytes, footprint_bytes,
  heap_resident_bytes (the footprint less the bytes subreleased and purged inside it) and the policies' extra
  columns (empty where a policy has none).
"""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from . import files, paths
from .after_peak import figures as window_figures
from .errors import FormatError, UserError
from .options import check_options

BINARY = "src/sim/llamalloc-sim"
FORMAT = "llamalloc-sim"
VERSION = 1
POLICIES = ("pages-4k", "pages-2m", "mesh-4k", "mesh-2m", "tcmalloc", "tcmalloc-lifetime", "llama-oracle",
            "llama-oracle-best", "llama-default", "llama-model", "llama-online")
#: The tracer's own library: its frames are removed from the trace's stacks, so it needs no token table.
TRACER_LIBRARY = "libllamalloc_prof"
ALIASES = {"mesh": ("mesh-4k", "mesh-2m")}


def binary() -> Path:
    return paths.native_program(BINARY)


def _error_of(r: subprocess.CompletedProcess) -> UserError:
    lines = [line for line in r.stderr.splitlines() if line.startswith("llamalloc-sim: error: ")]
    message = lines[-1][len("llamalloc-sim: error: "):] if lines else f"llamalloc-sim failed with status {r.returncode}"
    return UserError(message, exit_code=2 if r.returncode == 2 else 1)


def check_heap_options(heap_options: Iterable[str], search: Iterable[str] = ()) -> None:
    """Raises a one-line UserError naming the first bad "NAME=VALUE" or "--search NAME=V1,V2,...", at once, before
    tokens are prepared: a setting the library's options table refuses (`options.check_options`), then what
    llamalloc-sim refuses of its own command line (an option it takes as a flag of its own, such as MODEL as
    --model; a search of an option that is not a placement option, or of a value refused)."""
    heap_options, search = [str(o) for o in heap_options], [str(s) for s in search]
    check_options(heap_options)
    args = [str(binary())]
    for o in heap_options:
        args += ["--option", o]
    for spec in search:
        args += ["--search", spec]
    r = subprocess.run(args + ["--check-heap-options"], capture_output=True, text=True)
    if r.returncode != 0:
        raise _error_of(r)


@dataclass
class PolicyResult:
    policy: str
    summary: dict
    extras: dict
    timeline: dict[str, np.ndarray]  # column -> values (float; NaN where the CSV cell is empty)
    snapshots: list = field(default_factory=list)
    #: The library options the llama policies' heap was built from (name -> value; llama-oracle-best: its best).
    heap_options: dict = field(default_factory=dict)
    #: llama-oracle-best: the search ("space", "base", "best", "settings", "candidates", ...; docs/simulator.md).
    search: dict = field(default_factory=dict)

    @property
    def time_s(self) -> np.ndarray:
        return self.timeline["time_ns"] / 1e9

    def after_peak(self) -> dict:
        """The state after the peak (docs/bench.md, "After the peak"; `llamalloc.after_peak`): the medians of
        footprint and live bytes from the live peak's end to the end of the quiet phase, without the exit
        teardown, which `final_*` does not show; with the window's first and last sample times."""
        return after_peak(self.timeline)


def after_peak(timeline: dict[str, np.ndarray]) -> dict:
    """`llamalloc.after_peak.figures` over a simulation's timeline (the window is the same for every policy: live
    bytes are the engine's)."""
    empty = np.zeros(0)
    return window_figures(timeline.get("time_ns", empty), timeline.get("live_bytes", empty),
                          timeline.get("footprint_bytes", empty), timeline.get("heap_resident_bytes"))


def window_text(result: PolicyResult) -> str:
    """The after-peak window as seconds of the trace: "0.50-4.50 s"."""
    a, first = result.after_peak(), result.summary.get("first_time_ns", 0)
    return f"{(a['start_ns'] - first) / 1e9:.2f}-{(a['end_ns'] - first) / 1e9:.2f} s"


#: Lifetime placement can help when the oracle keeps at least this share less than the base after the peak.
HELPS_SHARE = 0.1


def conclusion(result: SimResult, trace_name: str, profile_every_allocation: bool = False) -> str | None:
    """The verdict on a replay, from its after-peak figures (one window for every policy): what an oracle that
    knows every lifetime keeps after the peak against 2 MiB pages without lifetimes (or tcmalloc), and against the
    model and 4 KiB pages when replayed: whether lifetime placement could help this program, and by how much.
    `llamalloc simulate` prints it under its table, `llamalloc report` opens with it. A model that gets less than
    half of the oracle's gain is advised a denser profile or online learning; with `profile_every_allocation`
    (the model's profile recorded every allocation, which `llamalloc report` knows from its --profile files) only
    online learning, since no profile is denser."""
    p = result.policies
    oracle = p.get("llama-oracle") or p.get("llama-oracle-best")
    base = p.get("pages-2m") or p.get("tcmalloc")
    if oracle is None or base is None:
        return None
    text = _verdict(p, oracle, base, trace_name, profile_every_allocation)
    default = p.get("llama-default")
    if text is not None and default is not None:
        # After the verdict's first sentence: what llamalloc without a model keeps, and of it what is resident.
        a = default.after_peak()
        first, rest = text.split(" this program.", 1)
        text = (f"{first} this program. llamalloc without a model (llama-default) keeps "
                f"{_mib_text(a['footprint_bytes'])} MiB of huge pages after the peak, "
                f"{_mib_text(a['heap_resident_bytes'])} MiB of them heap-resident (less what its sweeper subreleased "
                f"and purged).{rest}")
    return text


def _verdict(p: dict, oracle: PolicyResult, base: PolicyResult, trace_name: str,
             profile_every_allocation: bool) -> str | None:
    oa, ba = oracle.after_peak(), base.after_peak()
    o, b, live = oa["footprint_bytes"], ba["footprint_bytes"], oa["live_bytes"]
    if not b:
        return None
    when = f"after the peak ({window_text(oracle)} of the trace)"
    saved = (b - o) / b
    if saved >= HELPS_SHARE:
        text = (f"{trace_name}: {when}, placed by lifetime, the program would keep {_mib_text(o)} MiB of huge "
                f"pages instead of {_mib_text(b)} MiB ({base.policy}), {100 * saved:.0f}% less, for "
                f"{_mib_text(live)} MiB live: lifetime placement can help this program.")
        model = p.get("llama-model")
        if model is not None:
            m = model.after_peak()["footprint_bytes"]
            text += (f" The model keeps {_mib_text(m)} MiB: "
                     + ("it gets most of that gain." if m <= o + 0.5 * (b - o) else
                        "it gets less than half of that gain ("
                        + ("its profile already records every allocation, so a denser one cannot help; online "
                           "learning may)." if profile_every_allocation else
                           "a denser profile, or online learning, may help).")))
        return text
    than = "about as much as" if o <= b * (1 + HELPS_SHARE) else f"{100 * (o - b) / b:.0f}% more than"
    text = (f"{trace_name}: {when}, the oracle keeps {_mib_text(o)} MiB, {than} {base.policy} "
            f"({_mib_text(b)} MiB), for {_mib_text(live)} MiB live: lifetime placement would not help this program.")
    small = p.get("pages-4k")
    if small is not None:
        text += f" 4 KiB pages would keep {_mib_text(small.after_peak()['footprint_bytes'])} MiB."
    return text


def _mib_text(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def search_summary(best: PolicyResult) -> str:
    """One line for llama-oracle-best's result: the options that kept the least after the peak (as the library's
    environment variables), against llama-oracle under the base options (the defaults, or --option's)."""
    search = best.search
    base, top = search["base"], search["best"]
    tried = len(search.get("candidates", []))
    changed = any(top["options"][k] != v for k, v in base["options"].items())
    defaults = search.get("defaults", base["options"])
    given = "the options given" if any(base["options"][k] != v for k, v in defaults.items()) else "the default options"
    key = "after_peak_footprint_bytes" if "after_peak_footprint_bytes" in base else "final_footprint_bytes"
    if not changed:
        return (f"llama-oracle-best: none of the {tried} option settings replayed keeps less after the peak than "
                f"{given} ({_mib_text(base[key])} MiB)")
    settings = " ".join(search.get("settings", [])) or "the library's defaults"
    ratio = search.get("base_over_best_after_peak_footprint", search.get("base_over_best_final_footprint"))
    ratio_text = f", {ratio:.2f} times as much" if ratio is not None else ""
    return (f"llama-oracle-best: {_mib_text(top[key])} MiB after the peak with {settings}; "
            f"{_mib_text(base[key])} MiB with {given} (llama-oracle){ratio_text} "
            f"({tried} option settings replayed)")


def default_output(trace: str | os.PathLike) -> Path:
    """Where `llamalloc simulate TRACE` writes its result without -o: TRACE's file name with the suffix .sim.json
    (server.trace -> server.sim.json), in the current folder."""
    return Path(Path(trace).name).with_suffix(".sim.json")


@dataclass
class SimResult:
    path: Path
    trace: str
    interval_ns: int
    policies: dict[str, PolicyResult]


def trace_mappings(trace: str | os.PathLike) -> list[tuple[str, str]]:
    """The executable mappings of a trace's process, (path as the process named it, build id in hex), read by the
    engine (which checks the whole file first: a bad trace is a one-line FormatError)."""
    r = subprocess.run([str(binary()), str(trace), "--list-mappings"], capture_output=True, text=True)
    if r.returncode != 0:
        raise _error_of(r)
    out = []
    for line in r.stdout.splitlines():
        path, _, build_id = line.partition("\t")
        out.append((path, build_id))
    return out


def trace_binaries(trace: str | os.PathLike) -> list[str]:
    """The binaries of a trace that exist here and are worth token tables: real paths of its executable mappings,
    in order, without the tracer's own library. Missing ones are left out (the engine names them in a warning:
    their frames are <unsymbolized>)."""
    binaries: list[str] = []
    for path, _ in trace_mappings(trace):
        if not path.startswith("/") or Path(path).name.startswith(TRACER_LIBRARY):
            continue
        real = os.path.realpath(path)
        try:
            with open(real, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
        except OSError:
            continue
        if real not in binaries:
            binaries.append(real)
    return binaries


def prepare_tokens(model_path: str | os.PathLike, trace: str | os.PathLike,
                   log: Callable[[str], None] = lambda m: None) -> Path | None:
    """Token tables of the trace's binaries for the model, as `llamalloc run --model` prepares them for a program:
    in the cache (LLAMALLOC_CACHE_DIR, default ~/.cache/llamalloc/tokens), keyed by the model's vocabulary and each
    binary's path, size and mtime, so a second simulation (or a run of the same program) prepares nothing. None
    when no binary of the trace is on this machine."""
    import hashlib

    from . import prepare as prep
    from .model import modelfile

    model = modelfile.read(model_path)  # a bad model is refused here (one line naming the file)
    binaries = trace_binaries(trace)
    if not binaries:
        return None
    identity = [f"{prep.vocab_crc(model):08x}", str(len(model.vocabulary))]
    for b in binaries:
        st = os.stat(b)
        identity.append(f"{b}\n{st.st_size}\n{st.st_mtime_ns}")
    key = hashlib.sha256(f"{prep.VERSION}.{prep.PREPARE_REVISION}\n".encode()
                         + "\n".join(identity).encode()).hexdigest()[:32]
    out = prep._cache_dir() / f"{key}.tokens"
    if not out.exists():
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the token cache {out.parent}: {e.strerror}") from None
        prep.prepare(model_path, binaries, out, log=log)
    return out


@dataclass(frozen=True)
class Settings:
    """What a replay is run with, besides the trace, the policies and the output file.

    `heap_options` are "NAME=VALUE" assignments of the library's options (LLAMALLOC_NAME, docs/options.md): the
    llama policies' heap and predictor are configured from them as the library's would be. They are checked
    against the options table (names, bounds) with the library's own parser before anything is replayed.
    `search` are "NAME=V1,V2,..." specs of the values llama-oracle-best tries for a placement option (the
    others keep its default search space); `jobs` its replays at once (0: one per hardware thread).
    """
    interval_ms: float = 10.0          # timeline sample period, in trace time
    mesh_period_ms: float = 100.0      # how often the mesh policies mesh
    seed: int = 1                      # randomness of the mesh policies
    thread_idle_ms: float = 500.0      # llama policies: an idle traced thread gives its empty spans back; 0: never
    other_threads: bool = False        # llama policies: the process had threads that never allocate (its sweeper ran)
    snapshot_ms: tuple[float, ...] = ()  # llama policies: heap snapshot times
    heap_options: tuple[str, ...] = ()
    model: str | os.PathLike | None = None  # llama-model: the lifetime model
    tokens: str | os.PathLike | None = None  # llama-model: token tables (default: prepared and cached)
    predict_log: str | os.PathLike | None = None  # llama-model: "class: token ids" per context classified
    search: tuple[str, ...] = ()       # llama-oracle-best: "NAME=V1,V2,..." per searched option
    jobs: int = 0                      # llama-oracle-best: replays at once; 0: one per hardware thread

    def arguments(self) -> list[str]:
        """llamalloc-sim's arguments for these settings (without the model's files)."""
        args = ["--interval-ms", repr(float(self.interval_ms)), "--mesh-period-ms", repr(float(self.mesh_period_ms)),
                "--seed", str(int(self.seed)), "--thread-idle-ms", repr(float(self.thread_idle_ms))]
        if self.other_threads:
            args.append("--other-threads")
        for o in self.heap_options:
            args += ["--option", str(o)]
        for t in self.snapshot_ms:
            args += ["--snapshot-ms", repr(float(t))]
        for spec in self.search:
            args += ["--search", str(spec)]
        if self.jobs:
            args += ["--jobs", str(int(self.jobs))]
        return args


def simulate(trace: str | os.PathLike, policies: Iterable[str], out: str | os.PathLike,
             settings: Settings | None = None, *, progress: Callable[[str], None] | None = None,
             warn: Callable[[str], None] | None = None, **fields) -> SimResult:
    """Replays `trace` through each policy; writes `out` (JSON) and its timeline CSV; returns the result.

    `settings` (or its fields as keywords: `simulate(t, p, o, interval_ms=20)`) say how. llama-model needs
    `settings.model`; its token tables are `settings.tokens` if given, else prepared for the trace's binaries (and
    cached). Warnings (binaries whose frames cannot be tokenised, heap options the replay does not model) go to
    `warn`, even when `progress` is None."""
    if settings is None:
        settings = Settings(**{k: tuple(v) if k in ("heap_options", "snapshot_ms", "search") else v
                               for k, v in fields.items()})
    elif fields:
        raise TypeError("simulate: give either settings or its fields, not both")
    model, tokens = settings.model, settings.tokens
    trace = Path(trace)
    if not trace.exists():
        raise UserError(f"{trace}: no such trace file")
    policies = list(policies)
    if not policies:
        raise UserError("simulate: give at least one --policy")
    for p in policies:
        if p not in POLICIES and p not in ALIASES:
            raise UserError(f"unknown policy '{p}' (known: {', '.join(POLICIES + tuple(ALIASES))})")
    wants_model = "llama-model" in policies
    if wants_model and model is None:
        raise UserError("llama-model needs a model: --model FILE (from `llamalloc train`)")
    if not wants_model and (model is not None or tokens is not None):
        raise UserError("--model and --tokens are for --policy llama-model")
    # Before the replay, which may take minutes: the result, its timeline beside it, and the prediction log.
    out = files.check_output_file(out, "result")
    if settings.predict_log is not None:
        files.check_output_file(settings.predict_log, "--predict-log")
    if settings.search and "llama-oracle-best" not in policies:
        raise UserError("--search is for --policy llama-oracle-best")
    if settings.jobs < 0:
        raise UserError(f"--jobs wants a number of threads >= 1, got {settings.jobs}")
    if settings.heap_options or settings.search:
        check_heap_options(settings.heap_options, settings.search)
    cmd = [str(binary()), str(trace), "--out", str(out), *settings.arguments()]
    if wants_model:
        from .model import modelfile

        modelfile.read(model)  # one line naming a missing or corrupt model before anything runs
        if tokens is None:
            tokens = prepare_tokens(model, trace, log=progress or (lambda m: None))
        elif not Path(tokens).is_file():
            raise FormatError(tokens, "no such file")
        cmd += ["--model", str(model)]
        if tokens is not None:
            cmd += ["--tokens", str(tokens)]
        if settings.predict_log is not None:
            cmd += ["--predict-log", str(settings.predict_log)]
    for p in policies:
        cmd += ["--policy", p]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    last_error = None
    assert proc.stderr is not None
    for line in proc.stderr:
        line = line.rstrip("\n")
        if line.startswith("llamalloc-sim: error: "):
            last_error = line[len("llamalloc-sim: error: "):]
        elif line.startswith("llamalloc-sim: warning: "):
            if warn is not None:
                warn(line[len("llamalloc-sim: warning: "):])
        elif progress is not None:
            progress(line.removeprefix("llamalloc-sim: "))
    rc = proc.wait()
    if rc != 0:
        # The engine's error already names the file and the byte offset; keep it to one line.
        raise UserError(last_error or f"llamalloc-sim failed with status {rc}", exit_code=2 if rc == 2 else 1)
    return load(out)


def _number(text: str) -> float:
    return float(text) if text != "" else math.nan


def load(path: str | os.PathLike) -> SimResult:
    """Reads a simulation result written by `simulate` (or `llamalloc simulate`)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(path, f"not a simulation result (not JSON: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FormatError(path, "not a llamalloc simulation result")
    if doc.get("version") != VERSION:
        raise FormatError(path, f"simulation result version {doc.get('version')}, this llamalloc reads {VERSION}")
    try:
        csv_path = path.parent / doc["timeline_csv"]
        policies = {p["policy"]: PolicyResult(p["policy"], p["summary"], p.get("extras", {}), {},
                                              p.get("snapshots", []), p.get("heap_options", {}), p.get("search", {}))
                    for p in doc["policies"]}
    except (KeyError, TypeError) as e:
        raise FormatError(path, f"corrupt simulation result (missing {e})") from None
    rows: dict[str, list[list[float]]] = {name: [] for name in policies}
    try:
        with open(csv_path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            if header[:4] != ["policy", "time_ns", "live_bytes", "footprint_bytes"]:
                raise FormatError(csv_path, "not a simulation timeline (unexpected columns)")
            for n, row in enumerate(reader, start=2):
                if len(row) != len(header) or row[0] not in rows:
                    raise FormatError(csv_path, f"corrupt timeline at line {n}")
                rows[row[0]].append([_number(v) for v in row[1:]])
    except FileNotFoundError:
        raise FormatError(csv_path, "timeline file missing (it is written beside the JSON)") from None
    except (StopIteration, ValueError):
        raise FormatError(csv_path, "corrupt timeline") from None
    for name, result in policies.items():
        table = np.array(rows[name], dtype=float).reshape(-1, len(header) - 1)
        for i, column in enumerate(header[1:]):
            values = table[:, i]
            if column in ("time_ns", "live_bytes", "footprint_bytes", "heap_resident_bytes") or \
                    not np.all(np.isnan(values)):
                result.timeline[column] = values
    return SimResult(path, doc.get("trace", ""), int(doc.get("interval_ns", 0)), policies)
