#!/usr/bin/env python3
"""Ctrl-C of `llamalloc aggregate` at random moments: each round starts an aggregation of a synthetic fleet
(llamalloc.fleet.synthetic, made from two profiles of tests/model/predict-contexts) in a process group of its
own, sends SIGINT to the whole group as a terminal does, and checks what a user sees: exactly one line on stderr
besides the progress lines (and nothing on stdout), exit status 130, and the corpus as it was (a fresh corpus: no folder at all).

    python3 bench/profiler/ctrl_c_aggregate.py [--profiles 15000] [--rounds 20] [--min-s 0.5] [--max-s 10]
                                               [--workers N] [--seed 1] [--keep DIR]

The rounds alternate a fresh corpus and one that exists already (a copy of a corpus of 8 profiles, whose files
must be byte for byte the same afterwards). The moments are drawn uniformly from --min-s to --max-s or to 95% of
an uninterrupted aggregation's time (measured first), whichever is sooner; a round whose aggregation ended before
its moment (the machine's load varies) interrupts nothing and is drawn again. Each child starts with the default SIGINT handler (a parent
run under nohup or in the background ignores SIGINT, and a child inherits that). Prints one line per round and
a tally; exit status 0 when every round passed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llamalloc import paths
from llamalloc.fleet import corpus, synthetic


#: The progress lines an aggregation prints before it is interrupted (llamalloc.progress.Bar without a terminal):
#: not part of what the interruption prints.
PROGRESS = re.compile(r"aggregate: (reading [\d,]+ files with|[\d,]+/[\d,]+ profiles, )")


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def llamalloc(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamalloc", *map(str, args)], capture_output=True, text=True,
                          env=env, preexec_fn=default_sigint)


def base_profiles(folder: Path, env: dict) -> list[Path]:
    program = paths.build_dir() / "tests" / "model" / "predict-contexts"
    if not program.exists():
        sys.exit(f"ctrl_c_aggregate: {program} is not built: build the project first")
    out = []
    for mode in ("footprint", "sites"):
        prof = folder / f"{mode}.prof"
        for args in (("record", "--sample-bytes", "1", "-o", prof, "--", program, mode, 10), ("symbolize", prof)):
            r = llamalloc(*args, env=env)
            if r.returncode != 0:
                sys.exit(f"ctrl_c_aggregate: llamalloc {args[0]} failed: {r.stderr.strip()}")
        out.append(prof)
    return out


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", type=int, default=15000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--min-s", type=float, default=0.5)
    ap.add_argument("--max-s", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, default=None, help="folder for the fleet, kept between invocations")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = args.keep or Path(tempfile.mkdtemp(prefix="ctrl-c-aggregate-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LLAMALLOC_CACHE_DIR=str(work / "token-cache"))
    env.pop("LLAMALLOC_MODEL", None)
    fleet = work / "fleet"
    if not (fleet / ".complete").exists():
        shutil.rmtree(fleet, ignore_errors=True)
        bases = base_profiles(work, env)
        synthetic.write_fleet(bases, fleet, args.profiles, hosts=50, builds=2, seed=args.seed)
        synthetic.write_fleet(bases, work / "old", 8, hosts=2, builds=1, seed=args.seed + 1)
        (fleet / ".complete").write_text("")
    print(f"fleet: {sum(1 for _ in fleet.rglob('*.prof')):,} profiles in {fleet}", flush=True)
    pristine = work / "existing-pristine"
    if not corpus.is_corpus(pristine):
        r = llamalloc("aggregate", work / "old", "-o", pristine, env=env)
        if r.returncode != 0:
            sys.exit(f"ctrl_c_aggregate: the corpus of 8 profiles failed: {r.stderr.strip()}")
    before = snapshot(pristine)
    existing = work / "existing"
    workers = ["--workers", str(args.workers)] if args.workers else []
    # The moments are drawn from --min-s to the end of --max-s or of an uninterrupted aggregation, whichever is
    # sooner: a signal after the end interrupts nothing.
    shutil.rmtree(work / "whole", ignore_errors=True)
    started = time.monotonic()
    r = llamalloc("aggregate", fleet, "-o", work / "whole", *workers, env=env)
    whole_s = time.monotonic() - started
    shutil.rmtree(work / "whole", ignore_errors=True)
    if r.returncode != 0:
        sys.exit(f"ctrl_c_aggregate: an uninterrupted aggregation failed: {r.stderr.strip()}")
    latest = min(args.max_s, 0.95 * whole_s)
    print(f"an uninterrupted aggregation: {whole_s:.1f} s; SIGINT from {args.min_s} to {latest:.1f} s",
          flush=True)
    passed = early = done = 0
    while done < args.rounds and early <= args.rounds:
        i = done
        out = existing if i % 2 else work / "fresh"
        shutil.rmtree(work / "fresh", ignore_errors=True)
        shutil.rmtree(existing, ignore_errors=True)
        shutil.copytree(pristine, existing)
        delay = rng.uniform(args.min_s, latest)
        proc = subprocess.Popen([sys.executable, "-m", "llamalloc", "aggregate", str(fleet), "-o", str(out),
                                 *workers], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True, preexec_fn=default_sigint)
        time.sleep(delay)
        if proc.poll() is not None:  # ended before the signal: it interrupts nothing; the round is drawn again
            proc.communicate()
            print(f"round {i + 1:2d}: the aggregation ended before {delay:.2f} s (exit {proc.returncode}): drawn "
                  f"again", flush=True)
            early += 1
            continue
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        stdout, stderr = proc.communicate(timeout=300)
        lines = [line for line in stderr.splitlines() if line.strip() and not PROGRESS.match(line)]
        problems = []
        if proc.returncode != 130:
            problems.append(f"exit {proc.returncode}")
        if len(lines) != 1 or "interrupted" not in lines[0] or stdout.strip():
            problems.append(f"{len(lines)} lines on stderr, {len(stdout.splitlines())} on stdout")
        if out == existing:
            if snapshot(existing) != before:
                problems.append("the corpus changed")
        elif out.exists():
            problems.append("a fresh corpus's folder was left")
        if list(work.glob("**/.staging-*")):
            problems.append("a staging folder was left")
        ok = not problems
        passed += ok
        done += 1
        last = lines[-1] if lines else ""
        print(f"round {i + 1:2d}: SIGINT at {delay:5.2f} s into a {'fresh' if out != existing else 'existing'} "
              f"corpus: exit {proc.returncode}, {len(lines)} line(s): {'ok' if ok else '; '.join(problems)}: "
              f"{last[:160]}", flush=True)
        if not ok:
            print("  stderr: " + "\n  stderr: ".join(stderr.splitlines()[-30:]), flush=True)
    print(f"{passed} of {done} rounds: one line, exit 130, corpus as it was ({early} drawn again: the aggregation "
          f"had ended before the signal)")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if passed == done == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
