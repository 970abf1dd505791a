"""Shared helper of the tests that build a C program linked against libllamalloc.so (test_sweeper.py,
test_subrelease.py, test_stats_while_running.py) and run it with a clean LLAMALLOC_* environment."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from llamalloc.paths import native_library

REPO = Path(__file__).resolve().parents[2]


def build_linked(directory: Path, source: str, name: str = "p") -> Path:
    """Compiles `source` (C, with llamalloc.h and this folder's smaps.h on the include path) into directory/name,
    linked to the built libllamalloc.so with an rpath to it."""
    (directory / f"{name}.c").write_text(source)
    lib = native_library("libllamalloc.so")
    exe = directory / name
    subprocess.run([shutil.which("cc") or "gcc", "-O1", "-pthread", "-I", str(REPO / "include"),
                    "-I", str(Path(__file__).parent), "-o", str(exe), str(directory / f"{name}.c"), str(lib),
                    f"-Wl,-rpath,{lib.parent}"], check=True)
    return exe


def run_json(program: Path, *args: str, **env: str) -> list[dict]:
    """Runs the program with only the given LLAMALLOC_* variables; it must exit 0 with nothing on stderr. Returns
    the JSON documents it printed, in order."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("LLAMALLOC_")}
    e.update(env)
    r = subprocess.run([str(program), *args], capture_output=True, text=True, timeout=120, env=e)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == "", r.stderr
    docs, text, decoder = [], r.stdout.strip(), json.JSONDecoder()
    while text:
        doc, end = decoder.raw_decode(text)
        docs.append(doc)
        text = text[end:].strip()
    return docs
