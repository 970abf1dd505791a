"""Placement defaults chosen across the corpus, checked on held-out shapes. Reads the replays that
`bench/corpus/run.py` wrote (OUT/SHAPE.sim.json, each with llama-oracle-best's search: every setting of the
placement options replayed under the oracle, with its footprint after the peak), chooses the one setting that is
closest to each training shape's best (the lowest geometric mean of footprint / that shape's best), and reports,
for every shape, the chosen setting's and the library defaults' footprint against the shape's best. Held-out
shapes take no part in the choice: their ratios say whether the choice carries to programs it was not made on.

    python3 bench/corpus/placement.py OUT [--hold-out SHAPE ...]      (default: every third shape, by name)

Only settings replayed on every shape compete (the search's grid, the same on every trace; the descent's extra
settings differ per trace). Writes OUT/placement.md and prints it.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

MiB = 1 << 20


def load_searches(out: Path) -> dict[str, dict]:
    """Shape -> {settings key -> after-peak footprint}, plus the defaults' key under "_defaults"."""
    found: dict[str, dict] = {}
    for path in sorted(out.glob("*.sim.json")):
        data = json.loads(path.read_text())
        for p in data.get("policies", []):
            search = p.get("search")
            if p.get("policy") != "llama-oracle-best" or not search:
                continue
            shape = path.name[: -len(".sim.json")]
            table = {}
            for c in search["candidates"]:
                key = json.dumps(c["options"], sort_keys=True)
                table[key] = c.get("after_peak_footprint_bytes", c["final_footprint_bytes"])
            table["_defaults"] = json.dumps(search["defaults"], sort_keys=True)
            found[shape] = table
    return found


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def ratio(value: float, best: float) -> float:
    # A shape that keeps nothing after its peak under its best setting: every setting that keeps nothing ties.
    if best <= 0:
        return 1.0 if value <= 0 else float("inf")
    return value / best


def choose(searches: dict[str, dict], held_out: set[str], defaults: str) -> tuple[str, dict[str, float]]:
    """The setting with the lowest geometric mean of footprint / best over the training shapes; on a tie (within
    a part in a million) the library defaults, then the first by name."""
    common = None
    for table in searches.values():
        keys = {k for k in table if not k.startswith("_")}
        common = keys if common is None else common & keys
    if not common:
        raise SystemExit("placement: no setting was replayed on every shape")
    best_of = {s: min(v for k, v in t.items() if not k.startswith("_")) for s, t in searches.items()}
    training = [s for s in searches if s not in held_out]
    scores = {k: geomean([max(ratio(searches[s][k], best_of[s]), 1e-9) for s in training]) for k in common}
    chosen = min(sorted(scores), key=lambda k: (round(scores[k], 6), k != defaults))
    return chosen, scores


def differs(options_key: str, defaults_key: str) -> str:
    o, d = json.loads(options_key), json.loads(defaults_key)
    changed = [f"LLAMALLOC_{k}={v}" for k, v in o.items() if d.get(k) != v]
    return " ".join(changed) or "the defaults"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--hold-out", action="append", default=None, metavar="SHAPE")
    a = ap.parse_args()
    searches = load_searches(a.out)
    if len(searches) < 2:
        sys.exit(f"placement: {a.out} has llama-oracle-best replays of {len(searches)} shape(s); at least 2 needed")
    names = sorted(searches)
    held_out = set(a.hold_out) if a.hold_out else {n for i, n in enumerate(names) if i % 3 == 2}
    unknown = held_out - set(names)
    if unknown:
        sys.exit(f"placement: --hold-out {', '.join(sorted(unknown))}: no replay of that shape in {a.out}")
    defaults = next(iter(searches.values()))["_defaults"]
    chosen, scores = choose(searches, held_out, defaults)
    lines = [f"Chosen on {len(names) - len(held_out)} shapes, checked on {len(held_out)} held out: "
             f"{differs(chosen, defaults)} (geometric mean over the training shapes of footprint / the shape's "
             f"best: {scores[chosen]:.3f}; the library defaults: {scores.get(defaults, float('nan')):.3f}).", "",
             "| shape | held out | best (MiB) | chosen / best | defaults / best | best setting |",
             "|---|---|---|---|---|---|"]
    for s in names:
        t = searches[s]
        best_key = min((k for k in t if not k.startswith("_")), key=lambda k: t[k])
        best = t[best_key]
        lines.append(f"| {s} | {'yes' if s in held_out else ''} | {best / MiB:.1f} | {ratio(t[chosen], best):.2f} | "
                     f"{ratio(t[defaults], best) if defaults in t else float('nan'):.2f} | "
                     f"{differs(best_key, defaults)} |")
    text = "\n".join(lines) + "\n"
    (a.out / "placement.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
