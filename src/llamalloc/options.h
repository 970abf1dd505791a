// Runtime options: one table of name, type, default, bounds and help. Read once, at start, from
// LLAMALLOC_<NAME>; a bad value gives a one-line warning naming it and the default is used. docs/options.md is
// generated from this table (llamalloc-options --markdown) and checked against it by a test.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamalloc {

// X(NAME, field, kind, default, min, max, help): kind is Uint (an integer in [min, max]), String (a path) or Signal
// (a signal's name or number, kept as text: stats.cc parses it).
#define LLAMALLOC_OPTIONS(X)                                                                                      \
  X(CLASSES, classes, Uint, 8, 2, 8,                                                                             \
    "Number of lifetime classes. Class 0 holds objects living < 10 ms, each next class ten times longer; the "    \
    "last class is 'never freed'. With the default 8: 0 < 10 ms, 1 < 100 ms, 2 < 1 s, 3 < 10 s, 4 < 100 s, "     \
    "5 < 1000 s, 6 >= 1000 s, 7 never freed.")                                                                   \
  X(DEFAULT_CLASS, default_class, Uint, 1, 0, 7,                                                                 \
    "Lifetime class given to every allocation when no model is loaded (and to contexts the model is unsure "    \
    "of). Huge pages whose objects outlive their deadline are promoted, so a short default adapts upward. 1 "   \
    "(< 100 ms) rather than 0 (< 10 ms, whose pages are promoted after 40 ms): image-server's steady footprint "\
    "halves (docs/heap.md). Clamped to CLASSES-1.")                                                            \
  X(DEADLINE_K, deadline_k, Uint, 4, 1, 1000,                                                                    \
    "K in deadline = now + K x class duration, given to a huge page when it becomes active or changes class "    \
    "(the LLAMA paper, section 6.4, uses 2 and 4).")                                                             \
  X(SAME_CLASS_RECYCLING, same_class_recycling, Uint, 1, 0, 1,                                                  \
    "1: when a class's open huge page is full, the class's own active pages (free blocks, partially free spans) " \
    "are used before a fresh huge page, renewing that page's deadline. 0: never (the LLAMA paper, section 6.3).") \
  X(SMALL_HEAP_PAGES, small_heap_pages, Uint, 8, 0, 1000000,                                                      \
    "While fewer huge pages than this are in use, a class whose open page is full takes blocks from the open "   \
    "page of a longer class before it opens a fresh huge page (its objects die first, as in recycling), so a "   \
    "program with a few MiB live does not keep one huge page per lifetime class. 0: never.")                   \
  X(SUBRELEASE, subrelease, Uint, 50, 0, 100,                                                                    \
    "Subrelease: the sweeper gives back to the OS the free blocks of a huge page in which at most this "          \
    "percentage of the blocks are in use and from which no block was taken for a whole SWEEP_MS period, as far " \
    "as the heap holds more blocks than it used at its highest over the last 2 periods; sparsest pages first. "  \
    "The page stays in use on 4 KiB pages (its huge page is split), so RSS falls after a peak while long-lived " \
    "objects stay where they are. The same percentage bounds span purge: the 4 KiB pages inside a size-class "  \
    "span with at most this percentage of its objects in use that are all free go back once the span is idle. "    \
    "llamalloc_collect() does both at once. 0: never (every byte on 2 MiB pages).")                               \
  X(SUBRELEASE_QUIET, subrelease_quiet, Uint, 90, 0, 100,                                                        \
    "Subrelease and span purge once the program is quiet: on a sweeper pass after which the thread heaps ran at " \
    "most 64 slow paths and the huge pages took at most 64 blocks (512 KiB) since the previous pass, with no "   \
    "more blocks in use than then, the free blocks of huge pages and the free 4 KiB pages of spans with up to "  \
    "this percentage in use go back, instead of SUBRELEASE's, until the next pass that is not quiet. A server "  \
    "idle after its peak keeps its survivors on 4 KiB pages, and a load that comes back takes blocks again. At " \
    "or below SUBRELEASE: as SUBRELEASE; SUBRELEASE=0 turns both off.")                                         \
  X(PAGE_CACHE_PAGES, page_cache_pages, Uint, 1024, 0, 1000000,                                                  \
    "Page cache: the huge pages of a freed object over 2 MiB stay backed, up to this many, and the next huge "   \
    "object or page the heap opens reuses them instead of fresh memory that the kernel must zero. Each pass "    \
    "gives back, oldest first, what exceeds the larger of how far the pages in use are below their highest and " \
    "the most pages taken in one SWEEP_MS period, over the last 4 periods, but at most an eighth of the pages "  \
    "in use (half while huge objects turn over: over those periods they freed and took as many pages as are in " \
    "use); llamalloc_collect() gives back all. Without a sweeper, each free keeps the cache within what a "    \
    "pass leaves, and may keep the largest huge object taken lately (up to 16 MiB). One freed huge object "       \
    "of up to 16 MiB waits in front of it for the next allocation of its size. 0: off, a freed huge object's "   \
    "pages go back to the OS at once (the LLAMA paper, section 8).")                   \
  X(HUGE_PAGES, huge_pages, Uint, 2, 0, 2,                                                                       \
    "How the heap uses transparent huge pages. 2: huge pages where dense: a page is backed by 4 KiB pages as it "\
    "is touched and becomes one huge page (MADV_COLLAPSE, by the sweeper, at most 16 pages a pass) once nearly " \
    "all its blocks are in use and its 4 KiB pages resident, and where the default class fills pages densely "   \
    "its pages are huge from their first touch: resident memory follows what a program touches. 1: every page "  \
    "huge from its first touch (MADV_HUGEPAGE): the fewest page faults and no wait for a collapse, and a page "  \
    "touched anywhere is 2 MiB resident. 0: never (MADV_NOHUGEPAGE). Where the system's THP mode is \"always\", "\
    "the kernel backs pages huge at first touch and 2 behaves as 1 (docs/heap-memory.md, \"Huge pages where "    \
    "dense\").")                                                                                                 \
  X(SWEEP_MS, sweep_ms, Uint, 250, 0, 60000,                                                                       \
    "Period of the sweeper thread, in milliseconds. Each period it takes back, from every thread heap that has "  \
    "been used since (and is not inside the allocator at that moment), its empty spans and the frees other "     \
    "threads made into its spans, so that memory falls after a load peak while threads sleep or idle. Between "  \
    "passes it reads the live bytes every fifth of the period; a fall of a quarter (and 4 MiB) while the heaps " \
    "take no spans brings the pass forward, and the next one a fifth of the period after it. The thread "        \
    "starts when the process has a second thread heap, a thread besides the one that allocates, or a heap of "  \
    "SWEEPER_FROM_MIB. 0: no sweeper; a thread keeps its spans until it allocates again, exits or calls "        \
    "llamalloc_collect().")                                                                                      \
  X(SWEEPER_FROM_MIB, sweeper_from_mib, Uint, 16, 0, 1048576,                                                    \
    "A single-threaded process starts the sweeper thread once its heap's footprint reaches this many MiB: what " \
    "the slow paths' passes leave (empty spans, sparse pages, the page cache) then goes back while the program " \
    "is quiet, and the slow paths stop doing that work (an import job that frees a 48 MiB catalog keeps 6 MiB " \
    "where it kept 24). A smaller heap adds no thread to a process that has one (fork() warnings and thread "    \
    "counts would see it). 0: only a second thread starts it.")                                                  \
  X(SHARED_CLASS, shared_class, Uint, 3, 0, 8,                                                                   \
    "Small objects of this lifetime class and longer (3: predicted to live 1 s or more) come from one heap "     \
    "shared by all threads, under a lock, instead of each thread's own spans, once the process has a second "    \
    "thread heap: few long-lived objects are made per thread and size class, and a span each spreads them over " \
    "many spans. Any thread's free into it is taken in at once, under the same lock. A thread that takes 1024 "  \
    "objects of one such class within 100 ms takes that class from its own spans from then on. Always above "   \
    "DEFAULT_CLASS, so it matters with a model or with learning (the classes learning alone places). 8: none "  \
    "shared (every class from each thread's spans).")                                                          \
  X(LONG_CLASS, long_class, Uint, 4, 1, 8,                                                                      \
    "Objects of this lifetime class and longer (4: predicted to live 10 s or more) take their blocks from the "  \
    "huge pages of the longest class (never freed) instead of pages of their own class: each class in use keeps " \
    "an open huge page, and a long-lived class holding little paid one or two for it (redis with a model). "    \
    "Their holes are recycled by shorter classes, as every long-lived page's are. Always above DEFAULT_CLASS, " \
    "so it matters with a model, or with learning: learning alone places there the objects of contexts whose "  \
    "objects outlive this class's age unfreed, or whose frees say longer than this class (docs/prediction.md). 8: " \
    "every class on its own pages (as in the LLAMA paper).")                                                    \
  X(SPAN_RECYCLING, span_recycling, Uint, 1, 0, 1,                                                            \
    "1: a thread whose spans of a lifetime class and size class have no free block takes a partially free span " \
    "of that size class from a longer class of its own heap before new memory, until it is full or empty, then " \
    "gives it back to that class: objects expected to die first fill the holes the longer-lived ones left. 0: "  \
    "never (a span keeps its class). Matters only with a model.")                                             \
  X(DENSE_FIRST, dense_first, Uint, 1, 0, 1,                                                                  \
    "1: a span or large object placed on a huge page already in use takes the free blocks of the fullest such " \
    "page of its class that has room, as TCMalloc's huge page filler does, so that emptier pages drain and go "  \
    "back whole. 0: the page that got a free block last.")                                                       \
  X(CLASS_FALLBACK, class_fallback, Uint, 1, 0, 1,                                                              \
    "1: a lifetime class above DEFAULT_CLASS (only a model places objects there) whose huge pages stay less than " \
    "half as full as DEFAULT_CLASS's, on 2 pages or more, for 8 sweeper passes in a row, takes its blocks from "  \
    "DEFAULT_CLASS's pages from then on, as without a model (the counter class_fallbacks, page_class_by_class "  \
    "in the statistics): a model is not let keep memory that no-model placement would not. 0: never.")        \
  X(STATS, stats, String, "", 0, 0,                                                                              \
    "Path of the JSON statistics file written at exit (live and peak bytes, footprint, huge pages by class, "    \
    "RSS, event counters). Every process that inherits it writes it at exit; %p in the path is replaced by the "  \
    "process id. Empty: none.")                                                                        \
  X(STATS_SIGNAL, stats_signal, Signal, "", 0, 0,                                                                \
    "A signal (a name such as USR1, or a number) on which the statistics of the moment are written while the "   \
    "program runs: to the STATS path with .signal-N before its .json (N = 1, 2, ...), or to stderr when STATS "   \
    "is empty. The handler allocates nothing. Not USR2 with the profiler (LLAMALLOC_PROF_SIGNAL). Empty: none.")  \
  X(STATS_BEFORE_EXIT, stats_before_exit, Uint, 0, 0, 1,                                                         \
    "1: with STATS, also write the statistics before the program's teardown -- when exit() is called, or when "  \
    "main returns (before the destructors of global objects) -- to the STATS path with .before-exit before its " \
    ".json (libllamalloc.so, preloaded or linked; docs/heap.md). llamalloc run --stats sets it.")               \
  X(STATS_SUMMARY, stats_summary, Uint, 0, 0, 1,                                                                 \
    "1: print the statistics' one-line summary (live, footprint and its ratio to live, RSS, huge pages, pages "  \
    "by class, subreleased) to stderr at exit, with or without a STATS file. llamalloc run --stats sets it.")    \
  X(MODEL, model, String, "", 0, 0,                                                                              \
    "Path of a lifetime model file for the learned predictor. Empty: the model MODEL_DIR holds for the "         \
    "program's build, if any, else the default predictor (DEFAULT_CLASS). The statistics name the model loaded.") \
  X(MODEL_DIR, model_dir, String, "", 0, 0,                                                                      \
    "A directory of models prepared with llamalloc prepare --model-dir DIR, read when MODEL is empty: the "     \
    "program's executable gets the model that DIR/builds.index names for its GNU build id, with the token "      \
    "tables DIR/BUILD-ID.tokens (TOKENS is not read then), as MODEL and TOKENS would give them. A directory "     \
    "without that index, or without a line for this build: one warning line, no model. llamalloc run "         \
    "--model-dir chooses and prepares the model itself and does not pass this on (docs/prediction.md). Empty: " \
    "none.")                                                                                                    \
  X(TOKENS, tokens, String, "", 0, 0,                                                                            \
    "Path of the token tables of the program's binaries for the model (llamalloc prepare; docs/prediction.md). " \
    "Empty: every frame is unsymbolized, the model sees only the size.")                                        \
  X(REPREDICT_EVERY, repredict_every, Uint, 1000, 0, 4294967295,                                               \
    "A prediction cache entry runs the model again after this many hits and keeps the longer class (0: never).") \
  X(REPREDICT_BACKOFF, repredict_backoff, Uint, 10, 0, 16,                                                    \
    "A re-prediction that keeps an entry's class doubles that entry's period, up to REPREDICT_EVERY x "          \
    "2^REPREDICT_BACKOFF hits; one that changes it starts over (0: always every REPREDICT_EVERY hits).")        \
  X(UNSEEN_TRIAL, unseen_trial, Uint, 64, 0, 1000000,                                                        \
    "A context whose code path the model was not trained on (a model file that lists its training contexts' "   \
    "paths, or the contexts themselves) gets the longest class, never freed, until its prediction cache entry "  \
    "has had about this many hits; then the model's class (docs/prediction.md). Rare code the profile missed "  \
    "then sits among long-lived objects. A model that keeps no trained-on context apart from DEFAULT_CLASS "    \
    "gives such contexts DEFAULT_CLASS instead. 0: the model's class at once. Needs REPREDICT_EVERY above it.") \
  X(MIN_CONFIDENCE, min_confidence, Uint, 60, 0, 100,                                                           \
    "A model prediction is used only if its probability (softmax) exceeds this percentage (for a distribution "  \
    "model, train's default: the probability of its two likeliest classes together); otherwise the object "      \
    "gets DEFAULT_CLASS, the placement without a model: contexts the model is unsure of are placed as if no "    \
    "model were loaded. 0: always the model's class; 100: never.")                                             \
  X(MIN_CLASS, min_class, Uint, 3, 0, 7,                                                                         \
    "The shortest lifetime class a model's prediction (or a class learned beside a model) places objects "       \
    "in: a context predicted shorter is placed as without a model, in DEFAULT_CLASS. 3: the model keeps "        \
    "apart what it expects to outlive a second; shorter and medium lifetimes share the default class's "         \
    "pages, whose pages move to a longer class when their objects outlive the deadline, as without a "           \
    "model: each class in use keeps pages and spans of its own, and a class of short lifetimes beside the "      \
    "default one costs peak memory for little gain (docs/prediction.md). 0: the model's class as it is. "        \
    "At most CLASSES-2.")                                                                                        \
  X(PREDICT_DWARF, predict_dwarf, Uint, 1, 0, 1,                                                               \
    "1: a model run walks the caller's stack with the DWARF unwinder (libgcc's, from .eh_frame), as the "       \
    "profiler does, so that callers of code built without frame pointers are in the context as in the "        \
    "profile; 0: frame pointers only (they skip such callers).")                                              \
  X(PREDICT_LOG, predict_log, String, "", 0, 0,                                                                  \
    "Append 'class: token ids' of every model run to this file (tests, debugging). Empty: none.")               \
  X(LEARN, learn, Uint, 2, 0, 2,                                                                                 \
    "Learn each calling context's lifetime class in the process from sampled objects (docs/prediction.md, "     \
    "'Online learning'). 2: without a model only, from LEARN_FROM_MIB on; 1: also with MODEL (the model's "      \
    "class until the context's own evidence disagrees); 0: never. Without a model a context keeps "              \
    "DEFAULT_CLASS until its evidence decides, and only a class from LONG_CLASS up is kept (what goes on the "   \
    "longest class's pages: shorter lifetimes are what page promotion already separates). Every allocation "    \
    "of a learning process probes a per-thread prediction cache.")                                               \
  X(LEARN_FROM_MIB, learn_from_mib, Uint, 64, 0, 1048576,                                                      \
    "LEARN without MODEL starts once the heap's footprint first reaches this many MiB; until then the process " \
    "runs as without learning (no prediction cache, no samples). A heap of a few dozen huge pages has little "  \
    "for lifetimes to save, and learning costs each allocation a cache probe and each class its own spans. "    \
    "0: from the start. With MODEL, learning starts with the model.")                                          \
  X(LEARN_MIN_SAMPLES, learn_min_samples, Uint, 8, 1, 1000000,                                                 \
    "Sampled objects (freed, or live past 10 ms) a context needs before LEARN decides its class.")              \
  X(LEARN_OVERRIDE_SAMPLES, learn_override_samples, Uint, 32, 1, 1000000,                                      \
    "Sampled objects a context needs before its learned class replaces the model's (at most LEARN_WINDOW): a "  \
    "model's class is kept until the evidence against it is this strong.")                                    \
  X(LEARN_WINDOW, learn_window, Uint, 64, 0, 1000000,                                                          \
    "A context's counts of freed samples halve once they reach twice this, so that a new phase outweighs the "  \
    "old one after about this many frees. 0: never (all history weighs the same).")                            \
  X(LEARN_MARGIN, learn_margin, Uint, 2, 1, 7,                                                                  \
    "Classes a learned class must differ by to replace a context's class without learning (the model's, or "   \
    "DEFAULT_CLASS): a class one off places the context's objects together all the same, and moving the rest "  \
    "of them would split them over two classes' pages. 1: any difference.")                                   \
  X(LEARN_SAMPLE_EVERY, learn_sample_every, Uint, 16, 1, 1000000,                                              \
    "A context with LEARN_OVERRIDE_SAMPLES of evidence is sampled at one in this many checks of its prediction " \
    "cache entry (a check comes every 1 to 64 allocations); before that, at every check.")

// The profiler's options: read by libllamalloc_prof.so (`llamalloc record`, `llamalloc trace`; docs/profiler.md)
// when it is preloaded, with the same parser and warnings. Two more kinds: Choice (one of the words of `min`,
// '|'-separated; the field holds the word's index, so the words are in the order of the profiler's enum) and
// Seconds (a non-negative decimal number of seconds, at most `max`; the field holds nanoseconds, and
// kNoSeconds means "none").
inline constexpr uint64_t kNoSeconds = ~uint64_t{0};
#define LLAMALLOC_PROF_OPTIONS(X)                                                                                 \
  X(PROF_MODE, mode, Choice, 0, "off|profile|trace", 0,                                                           \
    "profile: sample allocations and write a lifetime profile; trace: write every allocation and free. off: "     \
    "the library only forwards to the allocator underneath.")                                                     \
  X(PROF_OUTPUT, output, String, "", 0, 0,                                                                        \
    "Output path; %p is replaced by the process id. Empty: llamalloc-%p.rawprof (profile) or llamalloc-%p.trace " \
    "(trace) in the working directory.")                                                                          \
  X(PROF_SAMPLE_BYTES, sample_bytes, Uint, 524288, 0, 1000000000000,                                              \
    "Profile mode: mean bytes allocated between two samples (each byte has the same chance of being sampled). "   \
    "0 or 1: every allocation.")                                                                                  \
  X(PROF_INTERVAL_S, interval_ns, Seconds, 0, 0, 1000000000,                                                      \
    "Profile mode: also write a profile every this many seconds, to OUTPUT.dump1, OUTPUT.dump2, ... 0: only at "  \
    "exit and on PROF_SIGNAL.")                                                                                   \
  X(PROF_STEADY_START_S, steady_start_ns, Seconds, kNoSeconds, 0, 1000000000,                                     \
    "Profile mode: sample no allocation from this many seconds after start on (the steady-state window's "        \
    "start; at most PROF_STEADY_END_S).")                                                                         \
  X(PROF_STEADY_END_S, steady_end_ns, Seconds, kNoSeconds, 0, 1000000000,                                         \
    "Profile mode: write a profile to OUTPUT.steady at the first sampled allocation this many seconds after "     \
    "start (the steady-state window's end).")                                                                     \
  X(PROF_SIGNAL, signal, Uint, 12, 0, 64,                                                                         \
    "Profile mode: the signal number that asks for a profile now, kept as the next OUTPUT.dumpN. 12 (SIGUSR2): " \
    "SIGUSR1 is often the program's own. 0: no handler.")                                                         \
  X(PROF_UNWIND, unwind, Choice, 0, "auto|fp|dwarf", 0,                                                           \
    "How stacks are walked: auto (frame pointers where the frame chain is intact, else the DWARF unwinder), fp "  \
    "(frame pointers only) or dwarf (the DWARF unwinder only).")                                                  \
  X(PROF_DEBUG, debug, Uint, 0, 0, 1,                                                                             \
    "1: print the sample, event, stack and unwinder counts to stderr at exit.")

struct Options {
#define LLAMALLOC_OPTION_FIELD_Uint(field, def) uint64_t field = def;
#define LLAMALLOC_OPTION_FIELD_String(field, def) const char* field = def;
#define LLAMALLOC_OPTION_FIELD_Signal(field, def) const char* field = def;
#define LLAMALLOC_OPTION_FIELD(NAME, field, kind, def, lo, hi, help) LLAMALLOC_OPTION_FIELD_##kind(field, def)
  LLAMALLOC_OPTIONS(LLAMALLOC_OPTION_FIELD)
#undef LLAMALLOC_OPTION_FIELD
};

struct ProfilerOptions {
#define LLAMALLOC_OPTION_FIELD_Choice(field, def) unsigned field = def;
#define LLAMALLOC_OPTION_FIELD_Seconds(field, def) uint64_t field = def;
#define LLAMALLOC_OPTION_FIELD(NAME, field, kind, def, lo, hi, help) LLAMALLOC_OPTION_FIELD_##kind(field, def)
  LLAMALLOC_PROF_OPTIONS(LLAMALLOC_OPTION_FIELD)
#undef LLAMALLOC_OPTION_FIELD
};

// Whether the process learns lifetimes online (LEARN): 1 always, 2 (the default) only without a model. A model
// already places from the first allocation; learning beside it is the user's choice (LEARN=1), as it can cost a
// model's runs more than it saves them (a sampled heap's spans at the peak), while a process without one gains
// a learner that waits for LEARN_FROM_MIB and costs what the measured runs show (docs/prediction.md).
inline bool learning_on(const Options& o, bool has_model) { return o.learn == 1 || (o.learn == 2 && !has_model); }

// Parses the options from `getenv_fn` (getenv in the process; a fake in tests). Warnings go to stderr with
// write(2). Never allocates.
Options read_options(const char* (*getenv_fn)(const char*));
// Sets the heap's option NAME (without LLAMALLOC_) of `options` to VALUE, as read_options reads LLAMALLOC_NAME=VALUE
// (a path keeps the pointer). When NAME is not an option of the heap's table, or VALUE is one the parser refuses,
// returns false and leaves `options` as it was, with the reason as one line into `reason` ("not an integer in
// [1, 8]", "LLAMALLOC_X is not a llamalloc option (did you mean LLAMALLOC_Y?)"). read_options, the simulator and
// `llamalloc-options --validate` all take a setting through here, so that they refuse the same ones in the same
// words. Never allocates.
bool set_option(Options* options, const char* name, const char* value, char* reason, size_t capacity);
// The same for the profiler's options (libllamalloc_prof.so compiles this file in: it is preloaded alone).
ProfilerOptions read_profiler_options(const char* (*getenv_fn)(const char*));
// The process's options (read once at start).
const Options& options();
void init_options();

// Warns (one line each, through `warn`) about every LLAMALLOC_* variable of `env` that is neither an option (of
// either table) nor another name of ours, with the closest name when one is near; returns how many. Each library
// checks its own names, so that a process that loads both warns once: the heap (init_options(), once at start)
// every name but LLAMALLOC_PROF_*, the profiler (profiler_names) only LLAMALLOC_PROF_*.
size_t check_environment_names(char* const* env, void (*warn)(const char* line), bool profiler_names = false);

// One line per option, as Markdown (docs/options.md): the heap's, then a section of the profiler's. Writes into buf; returns the length needed.
size_t format_options_markdown(char* buf, size_t capacity);

}  // namespace llamalloc
