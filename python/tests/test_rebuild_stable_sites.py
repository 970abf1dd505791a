"""Call-site words survive a rebuild that moves the code (docs/model.md, "Call sites"), and a model says when it
meets another build of its program. A small C program with two calls of malloc in one function, built twice:
as is, and with one unrelated function added ahead of it, so that the function moves and its code does not."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llamalloc import prepare, profile, symbolize
from llamalloc.model import modelfile
from llamalloc.model.tokenizer import UNK, Vocabulary

from test_profiler_common import llamalloc

APP_C = r"""
#include <stdio.h>
#include <stdlib.h>
#ifdef REBUILT
__attribute__((noinline)) int unrelated(const char* name) {
  const char* value = getenv(name);
  return value != NULL ? atoi(value) * 3 + 1 : 0;
}
__attribute__((constructor)) static void start_unrelated(void) {
  if (unrelated("APP_UNRELATED") == 4) puts("unrelated");
}
#endif
static void* kept[64];
__attribute__((noinline)) void two_sites(int i) {
  free(kept[i % 64]);
  kept[i % 64] = malloc(256);
  char* volatile scratch = malloc(256);
  scratch[0] = (char)i;
  free(scratch);
}
int main(void) {
  for (int i = 0; i < 4000; i++) two_sites(i);
  puts("ok");
  return 0;
}
"""


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """(first build, the rebuild), each at <dir>/app, each profiled at every allocation and symbolised."""
    d = tmp_path_factory.mktemp("rebuild")
    (d / "app.c").write_text(APP_C)
    cc = shutil.which("cc") or shutil.which("gcc")
    env = dict(os.environ, LLAMALLOC_CACHE_DIR=str(d / "cache"))
    apps = []
    for name, flags in (("first", []), ("rebuilt", ["-DREBUILT"])):
        (d / name).mkdir()
        app = d / name / "app"
        subprocess.run([cc, "-O2", "-g", "-fno-omit-frame-pointer", *flags, "-o", str(app), str(d / "app.c")],
                       check=True)
        prof = d / name / "app.prof"
        llamalloc("record", "--sample-bytes", "1", "-o", prof, "--", app, env=env, check_rc=0)
        llamalloc("symbolize", prof, env=env, check_rc=0)
        apps.append((app, prof))
    return d, env, apps


def two_sites_words(prof: Path) -> set[str]:
    """The call-site words that follow `two_sites` in the profile's stacks."""
    words = set()
    for stack in profile.samples_table([prof]).column("stack").to_pylist():
        if stack and stack[0] == "two_sites":
            assert profile.is_site_frame(stack[1]), stack
            words.add(stack[1])
    return words


def two_sites_calls(app: Path, vocab: Vocabulary) -> dict[int, str]:
    """Return address -> the call-site word `prepare` gives each call in `two_sites` (<unk> if not in vocab)."""
    table = prepare.build_binary_table(str(app), vocab)
    first = vocab.ids["two_sites"]
    calls = {}
    for ret, ids, _ in table.sites:
        if ids and ids[0] == first:
            calls[ret] = vocab.tokens[ids[2]]  # two_sites, @, its call-site word
    return calls


def test_call_site_words_are_the_same_before_and_after_a_rebuild_that_moves_the_code(builds):
    _, _, [(first, first_prof), (rebuilt, rebuilt_prof)] = builds
    before, after = two_sites_words(first_prof), two_sites_words(rebuilt_prof)
    # Two calls of malloc in one function: two words, so two contexts.
    assert len(before) == 2 and all(w.startswith("<site:app/two_sites+") for w in before), before
    assert after == before
    # `prepare` gives each call the word the profile gave it, in either build, though the calls have moved.
    vocab = Vocabulary.build([sorted(before) + ["two_sites"]])
    calls_before, calls_after = two_sites_calls(first, vocab), two_sites_calls(rebuilt, vocab)
    assert before <= set(calls_before.values()) and before <= set(calls_after.values()), (calls_before, calls_after)
    assert set(calls_before).isdisjoint(calls_after), "the rebuild did not move two_sites"
    assert sorted(calls_before.values()) == sorted(calls_after.values())


def test_a_model_records_its_build_and_notes_another_build_of_its_program(builds):
    d, env, [(first, first_prof), (rebuilt, _)] = builds
    model = d / "first.model"
    llamalloc("train", first_prof, "-o", model, "--holdout", "0", "--hidden", "16", "--epochs", "2", env=env,
              check_rc=0)
    m = modelfile.read(model)
    assert m.metadata["build_ids"] == [symbolize.build_id(str(first))]
    note = "was trained on another build of"
    same = llamalloc("prepare", "--no-libraries", model, first, "-o", d / "first.tokens", env=env, check_rc=0)
    assert note not in same.stderr, same.stderr
    other = llamalloc("prepare", "--no-libraries", model, rebuilt, "-o", d / "rebuilt.tokens", env=env,
                      check_rc=0)
    lines = [line for line in other.stderr.splitlines() if note in line]
    assert len(lines) == 1 and lines[0].startswith("llamalloc: note: first.model ") and str(rebuilt) in lines[0]
    assert symbolize.build_id(str(rebuilt))[:8] in lines[0] and "error" not in other.stderr
    # The rebuild's table gives the moved calls of malloc the words the model learned them by.
    vocab = Vocabulary(m.vocabulary)
    learned = two_sites_words(first_prof)
    assert all(vocab.ids.get(w, UNK) != UNK for w in learned)
    assert learned <= set(two_sites_calls(rebuilt, vocab).values())
    # A model written before build ids were recorded says nothing.
    m.metadata.pop("build_ids")
    assert prepare.trained_on_other_build(m, [str(rebuilt)]) == []
