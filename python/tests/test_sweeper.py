"""The idle sweep (docs/heap.md, "Idle threads"): worker threads that go to sleep after a burst give their spans
back without calling anything, through the sweeper thread of libllamalloc.so; LLAMALLOC_SWEEP_MS=0 turns it off
(then the sleeping threads keep the burst's huge pages), and a forked child starts its own."""
from __future__ import annotations

from pathlib import Path

import pytest

from linked_support import build_linked, run_json

# Four workers each allocate 6 MiB of 64 B - 12 KiB objects, hand half of them to main (which frees them: frees
# into the workers' spans), free the rest themselves, and sleep on a condition variable until main is done.
# Main waits `wait_ms`, then prints the statistics and its threads' names. With argument "fork", a child forked
# after the burst does the same with its own workers.
PROG = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <llamalloc.h>

enum { WORKERS = 4, PER = 6 << 20 };
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done, ready;
static void* handed[WORKERS][PER / 64];
static int nhanded[WORKERS];

static void* worker(void* arg) {
  int id = (int)(long)arg;
  static __thread void* mine[PER / 64];
  int n = 0, h = 0;
  size_t total = 0;
  for (unsigned i = 0; total < PER; i++) {
    size_t size = 64 + (i * 2654435761u) % (12 << 10);
    char* p = malloc(size);
    memset(p, (int)i, size);
    total += size;
    if (i % 2) handed[id][h++] = p; else mine[n++] = p;
  }
  for (int i = 0; i < n; i++) free(mine[i]);
  pthread_mutex_lock(&mu);
  nhanded[id] = h;
  ready++;
  pthread_cond_broadcast(&cv);
  while (!done) pthread_cond_wait(&cv, &mu);  /* idle: no allocator call */
  pthread_mutex_unlock(&mu);
  return NULL;
}

static int run(int wait_ms) {
  pthread_t t[WORKERS];
  done = ready = 0;
  for (long i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, worker, (void*)i);
  pthread_mutex_lock(&mu);
  while (ready < WORKERS) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < WORKERS; i++)
    for (int j = 0; j < nhanded[i]; j++) free(handed[i][j]);
  struct timespec ts = {wait_ms / 1000, (wait_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  static char buf[8192];
  size_t len = llamalloc_stats_json(buf, sizeof buf);
  if (len == 0 || len >= sizeof buf) return 3;
  buf[len] = 0;
  /* The threads' names, while the workers still sleep. */
  char names[1024] = "";
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], name[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (f) { if (fgets(name, sizeof name, f)) name[strcspn(name, "\n")] = 0; fclose(f); }
    strncat(names, name, sizeof names - strlen(names) - 2);
    strcat(names, ",");
  }
  closedir(d);
  printf("{\"stats\": %s, \"threads\": \"%s\"}\n", buf, names);
  fflush(stdout);
  pthread_mutex_lock(&mu);
  done = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
  return 0;
}

int main(int argc, char** argv) {
  int wait_ms = atoi(argv[1]);
  if (argc > 2 && strcmp(argv[2], "fork") == 0) {
    if (run(0) != 0) return 3;  /* the parent's burst, then fork: the child's sweeper is its own */
    pid_t pid = fork();
    if (pid == 0) _exit(run(wait_ms));
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
  }
  return run(wait_ms);
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build_linked(tmp_path_factory.mktemp("sweeper"), PROG)


def run(program: Path, *args: str, **env: str) -> list[dict]:
    return run_json(program, *args, **env)


def test_sleeping_threads_give_their_spans_back_through_the_sweeper(program):
    (on,) = run(program, "1500")
    (off,) = run(program, "1500", LLAMALLOC_SWEEP_MS="0")
    mib = 1 << 20
    # Without the sweeper the sleeping workers hold the burst's spans: many huge pages for almost nothing live.
    assert off["stats"]["counters"]["idle_heap_sweeps"] == 0
    assert "llamalloc-sweep" not in off["threads"]
    assert off["stats"]["footprint_bytes"] >= 16 * mib, off["stats"]
    # With it, their empty spans and the spans main's frees emptied went back while they slept.
    assert "llamalloc-sweep" in on["threads"], on["threads"]
    assert on["stats"]["counters"]["idle_heap_sweeps"] >= 4, on["stats"]["counters"]
    assert on["stats"]["footprint_bytes"] <= 6 * mib, on["stats"]
    # (Live bytes are counted per thread and flushed every 256 KiB, also by threads that only free.)
    assert on["stats"]["live_bytes"] < 4 * mib, on["stats"]


def test_a_forked_child_sweeps_its_own_idle_threads(program):
    parent, child = run(program, "1500", "fork")
    _, child_off = run(program, "1500", "fork", LLAMALLOC_SWEEP_MS="0")
    assert "llamalloc-sweep" in child["threads"], child["threads"]
    assert child["stats"]["counters"]["idle_heap_sweeps"] > parent["stats"]["counters"]["idle_heap_sweeps"]
    assert child_off["stats"]["footprint_bytes"] >= 16 << 20, child_off["stats"]
    assert child["stats"]["footprint_bytes"] <= child_off["stats"]["footprint_bytes"] // 2, child["stats"]


PTHREAD_EXIT = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void* worker(void* arg) {
  (void)arg;
  for (int i = 0; i < 100000; ++i) free(malloc(16 + i % 4000));
  usleep(600 * 1000);  /* past two sweeper periods: the sweeper runs */
  puts("worker done");
  fflush(stdout);
  return NULL;
}

int main(void) {
  pthread_t t;
  free(malloc(10));
  pthread_create(&t, NULL, worker, NULL);
  pthread_exit(NULL);  /* the process ends when its last thread does */
}
"""


def test_the_sweeper_does_not_keep_a_process_alive_after_its_last_thread(tmp_path):
    # The main thread calls pthread_exit and the worker returns: glibc ends the process then, as without the
    # library. The sweeper thread (which blocks every signal) ended it never, and SIGTERM could not either.
    import subprocess
    exe = build_linked(tmp_path, PTHREAD_EXIT)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and r.stdout == "worker done\n", (r.returncode, r.stdout, r.stderr)
