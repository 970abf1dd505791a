"""Synthetic profiles of a made-up C++ server whose lifetimes are known per calling context, for tests and the
training-speed benchmark. The lifetime of an allocation is decided by the subsystem that asked for it, a few
frames above a shared allocation helper (a string, a vector, operator new), as in the LLAMA paper's Figure 5:
the innermost frame alone cannot tell, the calling context can, and new combinations of callers keep the class.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .classes import NUM_CLASSES
from .dataset import samples_from_rows

#: subsystem namespace -> its lifetime class
SUBSYSTEMS = {
    "request::Handler": 0, "log::LineBuffer": 1, "batch::Pipeline": 2, "session::Session": 3,
    "stats::Window": 4, "cache::LruCache": 5, "index::Shard": 6, "config::Registry": 7,
}
HELPERS = [
    "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_create(unsigned long&, "
    "unsigned long)",
    "std::vector<int, std::allocator<int> >::_M_realloc_insert(__gnu_cxx::__normal_iterator<int*, "
    "std::vector<int, std::allocator<int> > >, int const&)",
    "operator new(unsigned long)",
    "proto2::Arena::AllocateAligned(unsigned long)",
    "absl::StrCat[abi:cxx11](absl::AlphaNum const&, absl::AlphaNum const&)",
]
VERBS = ["Add", "Parse", "Build", "Insert", "Append", "Load", "Merge", "Encode", "Resize", "Copy", "Store", "Read"]
NOUNS = ["Entry", "Record", "Header", "Chunk", "Frame", "Table", "Key", "Value", "Block", "Token", "Row", "Field"]
OUTER = [
    "server::Worker::Run()", "event::Loop::Dispatch(event::Event*)", "rpc::Server::HandleCall(rpc::Call*)",
    "thread::Pool::Execute(std::function<void ()>)", "util::Retry(std::function<bool ()> const&, int)",
    "std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (*)()> > >::_M_run()",
]


def synthetic_samples(n_contexts: int, seed: int = 0, program: str = "synthetic-server", profile: str = "synthetic.prof",
                      noise: float = 0.02, zipf: float = 1.2) -> pa.Table:
    """Samples (the schema of llamalloc.profile.samples_table) for `n_contexts` distinct contexts. Returns the
    table; the true class of a context is SUBSYSTEMS of its subsystem frame."""
    rng = np.random.default_rng(seed)
    subsystems = list(SUBSYSTEMS)
    rows = []
    seen = set()
    attempts = 0
    while len(seen) < n_contexts and attempts < 50 * n_contexts:
        attempts += 1
        sub = subsystems[rng.integers(len(subsystems))]
        stack = [HELPERS[rng.integers(len(HELPERS))]]
        for _ in range(rng.integers(1, 3)):
            stack.append(f"{sub}::{VERBS[rng.integers(len(VERBS))]}{NOUNS[rng.integers(len(NOUNS))]}"
                         f"({NOUNS[rng.integers(len(NOUNS))].lower()}::View const&)")
        for _ in range(rng.integers(1, 6)):
            stack.append(OUTER[rng.integers(len(OUTER))])
        stack.append("main")
        size = int(2 ** rng.integers(3, 14))
        key = (tuple(stack), size.bit_length())
        if key in seen:
            continue
        seen.add(key)
        label = SUBSYSTEMS[sub]
        count = int(min(rng.zipf(zipf), 100_000))
        counts = np.zeros(NUM_CLASSES, np.int64)
        counts[label] = count
        # A few shorter-lived objects do not move the 95th percentile.
        stray = int(np.floor(noise * count))
        if stray and label > 0:
            counts[label - 1] += stray
        rows.append({"profile": profile, "program": program, "stack": stack, "request_size": size,
                     "class_counts": counts.tolist()})
    return samples_from_rows(rows)


def true_class(stack) -> int:
    """The class the synthetic server gives a context."""
    for frame in stack:
        for sub, cls in SUBSYSTEMS.items():
            if frame.startswith(sub + "::"):
                return cls
    raise ValueError("not a synthetic stack")
