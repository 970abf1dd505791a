"""The package's import contracts (.importlinter at the repository root; docs/architecture.md, "Python package
layers"): lint-imports keeps them, and the same check fails on a contract the code breaks, so that it cannot pass
without checking. Names that moved down a layer stay importable where their users found them."""
from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / ".importlinter"


def lint_imports(config: Path, cwd: Path) -> subprocess.CompletedProcess:
    """lint-imports on this checkout's package (python/src first on the path, whatever else is installed)."""
    exe = Path(sysconfig.get_path("scripts")) / "lint-imports"
    found = str(exe) if exe.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports is not installed: scripts/setup.sh installs it (pip install -e python[dev])")
    path = [str(REPO / "python" / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run([found, "--no-cache", "--no-logo", str(config)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def read_config() -> configparser.ConfigParser:
    config = configparser.ConfigParser(interpolation=None)
    config.read(CONFIG)
    return config


def contract_sections(config: configparser.ConfigParser) -> list[str]:
    return [s for s in config.sections() if s.startswith("importlinter:contract:")]


def test_the_package_keeps_its_import_contracts(tmp_path):
    r = lint_imports(CONFIG, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    n = len(contract_sections(read_config()))
    assert n >= 3
    assert f"Contracts: {n} kept, 0 broken." in r.stdout
    assert not list(tmp_path.iterdir())  # --no-cache: no cache folder left where it ran


def reversed_layers(config: configparser.ConfigParser) -> str:
    layers = [line for line in config["importlinter:contract:layers"]["layers"].splitlines() if line.strip()]
    config["importlinter:contract:layers"]["layers"] = "\n" + "\n".join(reversed(layers))
    return "llamalloc.cli is not allowed to import llamalloc.commands"


def forbidden_function_level_import(config: configparser.ConfigParser) -> str:
    # top reads a trace through an import inside from_trace: a function-level import counts as any other.
    config["importlinter:contract:probe"] = {
        "name": "probe", "type": "forbidden", "source_modules": "llamalloc.top",
        "forbidden_modules": "llamalloc.traceformat"}
    return "llamalloc.top is not allowed to import llamalloc.traceformat"


@pytest.mark.parametrize("breaking", [reversed_layers, forbidden_function_level_import])
def test_lint_imports_fails_on_a_broken_contract(tmp_path, breaking):
    config = read_config()
    message = breaking(config)
    broken = tmp_path / "broken.importlinter"
    with open(broken, "w") as f:
        config.write(f)
    r = lint_imports(broken, tmp_path)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "BROKEN" in r.stdout
    assert message in r.stdout


def test_moved_names_stay_where_their_users_found_them():
    from llamalloc import trace, traceformat
    from llamalloc.fleet import corpus, parse

    for name in ("load", "read_raw", "Trace", "RawFile", "Mapping", "write_parquet", "is_compressed", "file_bytes",
                 "compress_bytes", "compress_file", "TRACE_MAGIC", "RAW_PROFILE_MAGIC", "KIND_ALLOC", "KIND_FREE",
                 "NO_STACK", "FROM_REALLOC", "ZSTD_MAGIC", "EVENT_DTYPE"):
        assert getattr(trace, name) is getattr(traceformat, name), name
    assert corpus.partition_key is parse.partition_key
