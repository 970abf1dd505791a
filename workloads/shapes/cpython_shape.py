"""The cpython shape (docs/workloads.md, "The corpus of program shapes"): a Python service's heap.

A catalog (a dict of str to str), an order book (a list of tuples holding lists and strings), a blob store
(bytes of 32 B to 64 KiB) and an inverted index (a dict of str to list) make the load peak; then most of it
is dropped, a fraction of each kept, and the process idles (the quiet phase), looking up what it kept.

Run by `llamalloc bench` as /usr/bin/python3 with PYTHONMALLOC=malloc, so that every object goes through the
allocator under test rather than CPython's own small-object arenas. With --quiet-marker and --quiet-end the
quiet phase starts by creating the marker file and ends when the end file appears (the harness samples the
process meanwhile); without them it lasts --quiet-seconds. Prints one JSON line like the other workloads.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import sys
import time
import zlib

SCALES = {"small": 1, "default": 5}
QUIET_SECONDS = {"small": 2.0, "default": 10.0}
INTERVAL_SECONDS = 0.2
WORDS = ("red", "green", "blue", "steel", "oak", "linen", "wool", "glass", "paper", "stone", "copper", "silk",
         "large", "small", "round", "square", "vintage", "modern", "classic", "outdoor", "kitchen", "garden")


def log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(lo * math.exp(rng.random() * math.log(hi / lo)))


def build_catalog(rng: random.Random, n: int) -> dict[str, str]:
    catalog = {}
    for i in range(n):
        words = [WORDS[rng.randrange(len(WORDS))] for _ in range(log_uniform(rng, 2, 300))]
        catalog[f"sku-{i:07d}-{WORDS[i % len(WORDS)]}"] = " ".join(words)
    return catalog


def build_orders(rng: random.Random, n: int, skus: list[str]) -> list[tuple]:
    orders = []
    for i in range(n):
        lines = [rng.randrange(1, 1000) for _ in range(rng.randrange(1, 12))]
        orders.append((i, skus[rng.randrange(len(skus))], lines, f"order {i} for customer {rng.randrange(100000)}"))
    return orders


def build_blobs(rng: random.Random, n: int) -> dict[int, bytes]:
    return {i: bytes([i % 251]) * log_uniform(rng, 32, 65536) for i in range(n)}


def build_index(catalog: dict[str, str]) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for sku, description in catalog.items():
        for word in set(description.split()):
            index.setdefault(word, []).append(sku)
    return index


def kept(key: str, one_in: int) -> bool:
    return zlib.crc32(key.encode()) % one_in == 0


def checksum(catalog: dict[str, str], orders: list[tuple], blobs: dict[int, bytes]) -> str:
    crc = 0
    for sku in sorted(catalog):
        crc = zlib.crc32(catalog[sku].encode(), zlib.crc32(sku.encode(), crc))
    for order in orders:
        crc = zlib.crc32(repr(order).encode(), crc)
    for key in sorted(blobs):
        crc = zlib.crc32(blobs[key], crc)
    return f"{crc:08x}"


def quiet_phase(seconds: float, marker: str | None, end: str | None, catalog: dict[str, str]) -> int:
    """The idle service: every INTERVAL_SECONDS a few lookups and a small request dict made and dropped.
    Returns the number of idle requests."""
    if marker:
        with open(marker, "w"):
            pass
    start = time.monotonic()
    # With an end file the harness decides; the limit only guards against a harness that went away.
    limit = seconds + 120 if end else seconds
    skus = sorted(catalog)
    requests = 0
    rng = random.Random(7)
    while time.monotonic() - start < limit:
        if end and os.path.exists(end):
            break
        request = {"sku": skus[rng.randrange(len(skus))], "headers": [f"x-{i}" for i in range(8)]}
        if catalog[request["sku"]] is None:
            raise SystemExit("cpython_shape: a kept catalog entry vanished")
        requests += 1
        time.sleep(INTERVAL_SECONDS)
    return requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="default")
    parser.add_argument("--quiet-seconds", type=float, default=None)
    parser.add_argument("--quiet-marker", default=None, help="file to create when the quiet phase starts")
    parser.add_argument("--quiet-end", default=None, help="file whose appearance ends the quiet phase")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    quiet = QUIET_SECONDS[args.scale] if args.quiet_seconds is None else args.quiet_seconds
    if not 0 <= quiet <= 86400:
        parser.error(f"--quiet-seconds: expected a number of seconds >= 0, got {args.quiet_seconds}")
    factor = SCALES[args.scale]
    rng = random.Random(args.seed)
    start = time.monotonic()

    # The load peak: everything alive at once.
    catalog = build_catalog(rng, 30000 * factor)
    skus = list(catalog)
    orders = build_orders(rng, 40000 * factor, skus)
    blobs = build_blobs(rng, 1200 * factor)
    index = build_index(catalog)
    operations = len(catalog) + len(orders) + len(blobs) + sum(len(v) for v in index.values())
    peak_objects = len(gc.get_objects())

    # The drop: a tenth of the catalog, the last twentieth of the orders, a sixteenth of the blobs stay.
    catalog = {sku: text for sku, text in catalog.items() if kept(sku, 10)}
    orders = orders[-len(orders) // 20:]
    blobs = {key: blob for key, blob in blobs.items() if key % 16 == 0}
    del index, skus
    gc.collect()
    seconds = time.monotonic() - start

    expected_catalog = sum(1 for i in range(30000 * factor) if kept(f"sku-{i:07d}-{WORDS[i % len(WORDS)]}", 10))
    problems = []
    if len(catalog) != expected_catalog:
        problems.append(f"{len(catalog)} catalog entries kept, expected {expected_catalog}")
    if any(blob != bytes([key % 251]) * len(blob) for key, blob in blobs.items()):
        problems.append("a kept blob changed")
    if [order[0] for order in orders] != list(range(40000 * factor - len(orders), 40000 * factor)):
        problems.append("the kept orders are not the last ones")
    total = checksum(catalog, orders, blobs)
    idle_requests = quiet_phase(quiet, args.quiet_marker, args.quiet_end, catalog) if quiet > 0 else 0
    if checksum(catalog, orders, blobs) != total:
        problems.append("the kept data changed during the quiet phase")
    result = {"workload": "cpython", "ok": not problems, "seconds": round(seconds, 3), "operations": operations,
              "operations_per_second": round(operations / seconds) if seconds > 0 else 0, "checksum": total,
              "peak_objects": peak_objects, "catalog_entries": len(catalog), "orders": len(orders),
              "blobs": len(blobs), "idle_requests": idle_requests,
              "python": sys.version.split()[0], "pymalloc": os.environ.get("PYTHONMALLOC", "")}
    if problems:
        result["failure"] = "; ".join(problems)
    print(json.dumps(result), flush=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
