"""gcc under libllamalloc.so: a multi-file C project (Lua 5.1, as vendored in the Debian redis source
package that workloads/redis builds) compiled and linked twice, once with gcc under glibc and once with gcc
under llamalloc (the driver, cc1, as and ld all preloaded). The compilers must produce the same bytes: every
object file and the linked binary are compared. Then the glibc-built lua runs Lua's own test programs and an
allocation-heavy script under glibc, the llamalloc-built one under llamalloc, and their outputs must be equal."""
from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llamalloc import paths
from test_workloads_support import llamalloc_library, preload_env

CFLAGS = ["-O2", "-g", "-Wall", "-DLUA_USE_POSIX", "-DLUA_USE_DLOPEN"]
# luac's own files, and redis's JSON module (it includes a header from redis's own src/).
NOT_IN_LUA = {"luac.c", "print.c", "lua_cjson.c", "strbuf.c", "fpconv.c"}

# Lua's test programs that read no input and print the same thing every run.
# (fib.lua prints timings, table.lua reads its input.)
LUA_TESTS = ["bisect.lua", "cf.lua", "factorial.lua", "fibfor.lua", "hello.lua", "life.lua", "printf.lua",
             "sieve.lua", "sort.lua"]

HEAVY_SCRIPT = r"""
-- Allocation-heavy: tables that grow and shrink, strings built and dropped, closures, coroutines, full GCs.
local function checksum(s) local h = 0 for i = 1, #s, 7 do h = (h * 31 + s:byte(i)) % 2147483647 end return h end
local t, total = {}, 0
for round = 1, 12 do
  for i = 1, 4000 do t[#t + 1] = string.rep(string.char(65 + (i + round) % 26), (i * round) % 300 + 1) end
  for i = #t, 1, -3 do table.remove(t, i) end
  local keys = {}
  for i = 1, 2000 do keys["k" .. i .. "_" .. round] = {i, tostring(i * round), {round}} end
  local n = 0
  for k, v in pairs(keys) do n = n + v[1] + #v[2] + v[3][1] end
  total = (total + n + #t) % 2147483647
  if round % 4 == 0 then collectgarbage("collect") end
end
table.sort(t)
print("strings", #t, checksum(table.concat(t, ",", 1, 500)))
local co = coroutine.wrap(function() for i = 1, 20000 do coroutine.yield(string.format("%05d:%x", i, i * 7)) end end)
local acc = {}
for i = 1, 20000 do acc[#acc + 1] = co() end
print("coroutine", #acc, checksum(table.concat(acc)))
local s = string.rep("lua allocator ", 50000)
local replaced, count = s:gsub("(%w+) (%w+)", "%2-%1")
print("gsub", count, #replaced, checksum(replaced:sub(1, 100000)))
local fns = {}
for i = 1, 50000 do local x = i fns[i] = function() return x * 2 end end
local sum = 0 for i = 1, #fns, 13 do sum = sum + fns[i]() end
print("closures", sum, total, collectgarbage("count") > 0)
"""


@pytest.fixture(scope="module")
def lua_source() -> Path:
    script = paths.repo_root() / "workloads" / "redis" / "runtest.sh"
    r = subprocess.run(["bash", str(script), "--print-tree"], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"{script} --print-tree failed: {r.stderr[-2000:]}"
    src = Path(r.stdout.strip().splitlines()[-1]) / "deps" / "lua"
    assert (src / "src" / "lapi.c").exists(), src
    return src


def build(src: Path, dest: Path, env: dict[str, str]) -> Path:
    """Compiles Lua in dest/src with gcc under env (two compilers at a time), links dest/src/lua."""
    shutil.copytree(src / "src", dest / "src")
    work = dest / "src"
    sources = sorted(p.name for p in work.glob("*.c") if p.name not in NOT_IN_LUA)
    flags = CFLAGS + [f"-fdebug-prefix-map={work}=."]

    def compile_one(name: str) -> None:
        r = subprocess.run(["gcc", *flags, "-c", name], cwd=work, env=env, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, f"gcc -c {name}: {r.stderr[-2000:]}"

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(compile_one, sources))
    objects = [n[:-2] + ".o" for n in sources]
    r = subprocess.run(["gcc", "-o", "lua", *objects, "-lm", "-ldl", "-Wl,-E"], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"gcc -o lua: {r.stderr[-2000:]}"
    return work / "lua"


@pytest.fixture(scope="module")
def builds(lua_source, tmp_path_factory):
    lib = llamalloc_library()
    glibc = build(lua_source, tmp_path_factory.mktemp("lua-glibc"), preload_env(None))
    llama = build(lua_source, tmp_path_factory.mktemp("lua-llamalloc"), preload_env(lib))
    return glibc, llama, lib


def test_gcc_under_llamalloc_produces_the_same_objects_and_binary(builds):
    glibc, llama, _ = builds
    objects = sorted(p.name for p in glibc.parent.glob("*.o"))
    assert len(objects) >= 30
    different = [o for o in objects if (glibc.parent / o).read_bytes() != (llama.parent / o).read_bytes()]
    assert not different, f"gcc under llamalloc wrote different objects: {different}"
    assert glibc.read_bytes() == llama.read_bytes(), "the linked lua binaries differ"


def run_lua(exe: Path, env, *args: str, stdin: str | None = None) -> str:
    r = subprocess.run([str(exe), *args], cwd=exe.parent.parent, env=env, input=stdin, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"{exe} {' '.join(args)}: rc={r.returncode}\n{r.stdout[-1000:]}\n{r.stderr[-2000:]}"
    return r.stdout


@pytest.mark.parametrize("script", LUA_TESTS)
def test_lua_test_programs_give_the_same_output(builds, lua_source, script):
    glibc, llama, lib = builds
    path = str(lua_source / "test" / script)
    want = run_lua(glibc, preload_env(None), path)
    got = run_lua(llama, preload_env(lib), path)
    assert want.strip(), f"{script} printed nothing"
    assert got == want


def test_allocation_heavy_lua_script_gives_the_same_output(builds, tmp_path):
    glibc, llama, lib = builds
    script = tmp_path / "heavy.lua"
    script.write_text(HEAVY_SCRIPT)
    want = run_lua(glibc, preload_env(None), str(script))
    got = run_lua(llama, preload_env(lib), str(script))
    assert want.splitlines()[0].startswith("strings\t") and len(want.splitlines()) == 4, want
    assert got == want
