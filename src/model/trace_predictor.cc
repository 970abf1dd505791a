#include "trace_predictor.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "stack_walk.h"

namespace llamalloc::model {

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

std::string real_path(const std::string& path, bool* exists) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) != nullptr) {
    *exists = true;
    return buf;
  }
  *exists = false;
  return path;
}

}  // namespace

TracePredictor::TracePredictor() : predictor_(std::make_unique<LearnedPredictor>()) {}
TracePredictor::~TracePredictor() = default;

bool TracePredictor::init(const std::string& model_path, const std::string& tokens_path, uint32_t repredict_every,
                          std::string* error, unsigned repredict_backoff) {
  char why[512];
  if (!predictor_->init(model_path.c_str(), tokens_path.empty() ? nullptr : tokens_path.c_str(), repredict_every,
                        why, sizeof why)) {
    *error = why;
    return false;
  }
  repredict_every_ = repredict_every;
  repredict_backoff_ = repredict_backoff;
  // Until the trace's mappings are loaded the module map is this process's: no trace address is known.
  predictor_->modules().load(nullptr, 0);
  return true;
}

void TracePredictor::load_mappings(const std::vector<TraceMapping>& mappings) {
  const TokenTables& tables = predictor_->tables();
  std::vector<Module> modules;
  placed_.clear();
  problems_.clear();
  problem_frames_.clear();
  std::unordered_map<std::string, int32_t> problem_of_path;
  for (const TraceMapping& m : mappings) {
    if (m.memory_limit <= m.memory_start) continue;
    Module module{uintptr_t(m.memory_start), uintptr_t(m.memory_limit), 0, -1};
    bool exists = false;
    std::string path = real_path(m.path, &exists);
    std::string reason;
    int b = -1;
    if (!exists) {
      reason = "not on this machine";
    } else if (tables.binary_count() == 0) {
      reason = "no token tables";
    } else if ((b = tables.find_binary(path.c_str())) < 0 && (b = tables.find_binary(m.path.c_str())) < 0) {
      reason = "not in the token tables";
    } else {
      const TokenTables::Binary& bin = tables.binary(uint32_t(b));
      struct stat st;
      // As the process's module map does: a binary changed since prepare is not used.
      bool fresh = ::stat(bin.path, &st) == 0 && uint64_t(st.st_size) == bin.file_bytes &&
                   int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec == bin.mtime_ns;
      // The table's build id (informative in the process) tells whether the file here is the one traced.
      // Binary::path is the start of the binary's 512-byte record (docs/formats/tokens.md): build_id_bytes at
      // offset 324, the build id at 328.
      const unsigned char* table_id = reinterpret_cast<const unsigned char*>(bin.path) + 328;
      uint32_t table_id_bytes;
      std::memcpy(&table_id_bytes, reinterpret_cast<const unsigned char*>(bin.path) + 324, 4);
      size_t n = std::min<size_t>(m.build_id.size(), 32);
      bool same_build = m.build_id.empty() || table_id_bytes == 0 ||
                        (table_id_bytes == n && std::memcmp(table_id, m.build_id.data(), n) == 0);
      if (!fresh) {
        reason = "changed since its token table was prepared";
      } else if (!same_build) {
        reason = "its build id differs from the traced binary's";
      } else {
        for (uint32_t s = 0; s < bin.segment_count; ++s) {
          const TokenTables::Segment& seg = bin.segments[s];
          if (m.file_offset >= seg.file_offset &&
              m.file_offset < seg.file_offset + (seg.file_bytes ? seg.file_bytes : 1)) {
            module.vaddr_bias = uintptr_t(m.memory_start - (m.file_offset - seg.file_offset + seg.vaddr));
            module.binary = b;
            break;
          }
        }
        if (module.binary < 0) reason = "no executable segment at the traced file offset";
      }
    }
    int32_t problem = -1;
    if (!reason.empty()) {
      auto it = problem_of_path.find(path);
      if (it == problem_of_path.end()) {
        it = problem_of_path.emplace(path, int32_t(problems_.size())).first;
        problems_.push_back(path + " (" + reason + ")");
        problem_frames_.push_back(0);
      }
      problem = it->second;
    }
    modules.push_back(module);
    placed_.push_back(Placed{m.memory_start, m.memory_limit, problem});
  }
  // The module map binary-searches by address: sorted, and an overlapping mapping (which a real process cannot
  // have) dropped.
  std::vector<size_t> order(modules.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return modules[a].start < modules[b].start; });
  std::vector<Module> sorted;
  std::vector<Placed> sorted_placed;
  for (size_t i : order) {
    if (!sorted.empty() && modules[i].start < sorted.back().end) continue;
    sorted.push_back(modules[i]);
    sorted_placed.push_back(placed_[i]);
  }
  placed_ = std::move(sorted_placed);
  predictor_->modules().load(sorted.data(), uint32_t(sorted.size()));
  memo_.clear();
}

void TracePredictor::note_stack(const uint64_t* frames, uint32_t depth) {
  noted_frames_ += depth;
  for (uint32_t i = 0; i < depth; ++i) {
    uint64_t pc = frames[i];
    auto it = std::upper_bound(placed_.begin(), placed_.end(), pc,
                               [](uint64_t a, const Placed& p) { return a < p.start; });
    if (it == placed_.begin()) continue;
    --it;
    if (pc < it->end && it->problem >= 0) ++problem_frames_[size_t(it->problem)];
  }
}

std::string TracePredictor::warning() const {
  std::string list;
  uint64_t frames = 0;
  size_t n = 0;
  for (size_t i = 0; i < problems_.size(); ++i) {
    if (problem_frames_[i] == 0) continue;
    list += (n++ ? ", " : "") + problems_[i];
    frames += problem_frames_[i];
  }
  if (placed_.empty() && noted_frames_ > 0) {
    return "the trace records no executable mapping: its " + std::to_string(noted_frames_) +
           " frames are <unsymbolized>";
  }
  if (n == 0) return "";
  return std::to_string(n) + (n == 1 ? " binary" : " binaries") + " of the trace cannot be tokenised: " + list +
         "; their frames (" + std::to_string(frames) + " in the trace's stacks) are <unsymbolized>";
}

uint64_t TracePredictor::stack_height_stand_in(const uint64_t* frames, uint32_t depth) {
  // In the process the height is the caller's frame address: it differs between call paths to the same return
  // address (their frames differ) and is the same for the same path. The callers' return addresses identify
  // the path; their hash plays the height.
  uint64_t h = 0x6A09E667F3BCC908ull;
  for (uint32_t i = 1; i < depth; ++i) h = mix(h, frames[i]);
  return h;
}

size_t TracePredictor::tokens(const uint64_t* frames, uint32_t depth, uint64_t size_bytes, uint32_t* out,
                              size_t max) {
  uintptr_t pcs[kMaxFrames];
  size_t n = depth < kMaxFrames ? depth : kMaxFrames;
  // The trace's pcs follow the convention of the process's walk (stack_walk.h): the same tokens.
  for (size_t i = 0; i < n; ++i) pcs[i] = uintptr_t(frames[i]);
  // The profiler's DWARF unwinder reaches the thread's root frames itself (as training's stacks do), so the
  // process's <thread-root> completion of a broken walk does not apply.
  return predictor_->tokens_of(pcs, n, size_t(size_bytes), out, max, false);
}

unsigned TracePredictor::classify(const uint64_t* frames, uint32_t depth, uint64_t size_bytes, bool* known) {
  uint32_t ids[kMaxTokens];
  size_t n = tokens(frames, depth, size_bytes, ids, kMaxTokens);
  float logits[kNumClasses];
  unsigned lc = model::classify(predictor_->model(), ids, n, logits, confidence_);
  if (known != nullptr) *known = predictor_->model().knows_code_path(ids, n);
  if (log_fd_ >= 0) {
    std::string line = std::to_string(lc) + ":";
    for (size_t i = 0; i < n; ++i) line += " " + std::to_string(ids[i]);
    line += "\n";
    ssize_t w = ::write(log_fd_, line.data(), line.size());
    (void)w;
  }
  return lc;
}

unsigned TracePredictor::predict(uint32_t thread, const uint64_t* frames, uint32_t depth, uint64_t size_bytes,
                                 uint64_t height) {
  if (last_cache_ == nullptr || thread != last_thread_) {
    auto it = caches_.find(thread);
    if (it == caches_.end()) {
      ++threads_;
      it = caches_.emplace(thread, std::make_unique<Cache>()).first;
    }
    last_thread_ = thread;
    last_cache_ = it->second.get();
  }
  unsigned sc = model_size_bucket(size_bytes);
  uintptr_t return_address = depth > 0 ? stack_walk::return_address_of(uintptr_t(frames[0])) : 0;
  uint64_t key = cache_key(return_address, uintptr_t(height), sc);
  return last_cache_->lookup(key, repredict_every_, counters_, [&] {
    CacheCounters::bump(counters_.model_runs);
    uint64_t memo_key = mix(depth > 0 ? mix(height, frames[0]) : height, sc);
    auto m = memo_.find(memo_key);
    if (m != memo_.end()) return unsigned(m->second);
    ++inferences_;
    bool known = true;
    bool rule = unseen_trial_ != 0 && repredict_every_ > unseen_trial_;
    unsigned lc = classify(frames, depth, size_bytes, rule ? &known : nullptr);
    if (!known) lc |= kUnseenContext;
    else if (lc > longest_answered_) longest_answered_ = lc;
    memo_.emplace(memo_key, uint16_t(lc));
    return lc;
  }, repredict_backoff_, unseen_trial_, trial_class());
}

TracePredictionTotals TracePredictor::totals() const {
  TracePredictionTotals t;
  t.hits = counters_.hits.load(std::memory_order_relaxed);
  t.misses = counters_.misses.load(std::memory_order_relaxed);
  t.model_runs = counters_.model_runs.load(std::memory_order_relaxed);
  t.repredictions = counters_.repredictions.load(std::memory_order_relaxed);
  t.repredictions_changed = counters_.repredictions_changed.load(std::memory_order_relaxed);
  t.unseen = counters_.unseen.load(std::memory_order_relaxed);
  t.model_inferences = inferences_;
  t.threads = threads_;
  return t;
}

}  // namespace llamalloc::model
