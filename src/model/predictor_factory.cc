// The heap's entries to the learned predictor: called once at init when LLAMALLOC_MODEL, LLAMALLOC_MODEL_DIR or
// LLAMALLOC_LEARN is set (src/llamalloc/alloc/init.cc declares them weak). Only linked into libllamalloc (they
// read the heap's options table); tests use LearnedPredictor and model_dir.h.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "base.h"
#include "learned_predictor.h"
#include "model_dir.h"
#include "options.h"
#include "stats.h"

namespace {

// One predictor per process, constructed in static storage at init (never on the heap).
alignas(llamalloc::model::LearnedPredictor) unsigned char g_predictor_storage[sizeof(llamalloc::model::LearnedPredictor)];

size_t describe_learning(char* buf, size_t capacity) {
  return reinterpret_cast<llamalloc::model::LearnedPredictor*>(g_predictor_storage)->describe_learning(buf, capacity);
}

// The model and token tables that LLAMALLOC_MODEL_DIR holds for this build: kept for the whole run (the
// predictor's error lines and the statistics name them).
char g_dir_model[4096], g_dir_tokens[4096];

}  // namespace

extern "C" __attribute__((visibility("default"))) bool llamalloc_model_of_directory(const char* dir,
                                                                                   const char** model_path,
                                                                                   const char** tokens_path) {
  using namespace llamalloc::model;
  const char* without = llamalloc::learning_on(llamalloc::options(), false) ? "a model (learning online)" : "a model";
  char exe[512];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) n = ssize_t(strlen(strcpy(exe, "the program")));
  exe[n] = '\0';
  char id[kBuildIdHexBytes];
  char line[1024];
  if (main_build_id(id, sizeof id) == 0) {
    format_message(line, sizeof line, "llamalloc: warning: LLAMALLOC_MODEL_DIR: %.400s has no GNU build id to "
                   "choose its model by; running without %s\n", exe, without);
    llamalloc::write_stderr(line);
    return false;
  }
  int error_number = 0;
  switch (find_prepared_model(dir, id, g_dir_model, sizeof g_dir_model, g_dir_tokens, sizeof g_dir_tokens,
                              &error_number)) {
    case PreparedModel::kFound:
      *model_path = g_dir_model;
      *tokens_path = g_dir_tokens;
      return true;
    case PreparedModel::kNoIndex: {
      size_t n = strlen(dir);
      format_message(line, sizeof line, "llamalloc: warning: LLAMALLOC_MODEL_DIR: %.300s%s%s: %s (prepare the "
                     "directory with llamalloc prepare --model-dir); running without %s\n", dir,
                     n > 0 && dir[n - 1] == '/' ? "" : "/", kBuildIndexName,
                     error_number == ENOENT ? "no such file" : strerrordesc_np(error_number), without);
      break;
    }
    case PreparedModel::kNoEntry:
      format_message(line, sizeof line, "llamalloc: warning: LLAMALLOC_MODEL_DIR: %.300s has no model prepared "
                     "for this build of %.300s (build id %.8s\u2026); running without %s\n", dir, exe, id, without);
      break;
    case PreparedModel::kTooLong:
      format_message(line, sizeof line, "llamalloc: warning: LLAMALLOC_MODEL_DIR: %.300s: a path of its model is "
                     "too long; running without %s\n", dir, without);
      break;
  }
  llamalloc::write_stderr(line);
  return false;
}

extern "C" __attribute__((visibility("default"))) llamalloc::Predictor* llamalloc_make_model_predictor(
    const char* model_path, const char* tokens_path) {
  // model_path null or empty: online learning alone (LLAMALLOC_LEARN without LLAMALLOC_MODEL).
  using namespace llamalloc::model;
  const llamalloc::Options& o = llamalloc::options();
  // Default-initialised (no "()"): value-initialisation would first zero all of the object, 170 KiB of module
  // tables included, and keep those pages resident for the whole run; static storage is zero already.
  auto* predictor = new (g_predictor_storage) LearnedPredictor;
  if (o.predict_log != nullptr && *o.predict_log)
    predictor->set_log_fd(open(o.predict_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  char error[512];
  bool ok = predictor->init(model_path, tokens_path, uint32_t(o.repredict_every), error, sizeof error,
                            unsigned(o.repredict_backoff), unsigned(o.default_class));
  if (!ok) {
    // A bad model file leaves online learning where it would run without a model (LEARN 1 or 2): it needs none.
    char line[600];
    format_message(line, sizeof line, "llamalloc: warning: %s; running without %s\n", error,
                   llamalloc::learning_on(o, false) ? "the model (learning online)" : "predictions");
    llamalloc::write_stderr(line);
    predictor->~LearnedPredictor();
    if (!llamalloc::learning_on(o, false) || model_path == nullptr || *model_path == '\0') return nullptr;
    predictor = new (g_predictor_storage) LearnedPredictor;
    if (!predictor->init(nullptr, nullptr, uint32_t(o.repredict_every), error, sizeof error,
                         unsigned(o.repredict_backoff), unsigned(o.default_class))) {
      predictor->~LearnedPredictor();
      return nullptr;
    }
  }
  if (predictor->has_model()) llamalloc::set_stats_model(model_path, tokens_path);
  predictor->set_dwarf_unwind(o.predict_dwarf != 0);
  // MIN_CLASS at most CLASSES-2, so that a model still places objects of the last two classes by itself.
  unsigned shortest = unsigned(o.min_class);
  if (shortest + 2 > unsigned(o.classes)) shortest = unsigned(o.classes) - 2;
  predictor->set_confidence_rule(ConfidenceRule{unsigned(o.min_confidence), unsigned(o.default_class), shortest});
  predictor->set_unseen_trial(uint32_t(o.unseen_trial));
  if (llamalloc::learning_on(o, predictor->has_model())) {
    if (predictor->set_learning(learn_rule_of(o, predictor->has_model() ? &predictor->model() : nullptr, shortest))) {
      llamalloc::set_stats_section(describe_learning);
    } else {
      llamalloc::write_stderr("llamalloc: warning: LLAMALLOC_LEARN: cannot map the learner's tables; not learning\n");
      if (!predictor->has_model()) {
        predictor->~LearnedPredictor();
        return nullptr;
      }
    }
  }
  return predictor;
}
