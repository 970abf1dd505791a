// The heap's entry to the learned predictor: called once at init when LLAMALLOC_MODEL is set
// (src/llamalloc/alloc/init.cc declares it weak). Only linked into libllamalloc (it reads the heap's options
// table); tests use LearnedPredictor.
#include <fcntl.h>

#include <new>

#include "base.h"
#include "learned_predictor.h"
#include "options.h"
#include "stats.h"

namespace {

// One predictor per process, constructed in static storage at init (never on the heap).
alignas(llamalloc::model::LearnedPredictor) unsigned char g_predictor_storage[sizeof(llamalloc::model::LearnedPredictor)];

size_t describe_learning(char* buf, size_t capacity) {
  return reinterpret_cast<llamalloc::model::LearnedPredictor*>(g_predictor_storage)->describe_learning(buf, capacity);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) llamalloc::Predictor* llamalloc_make_model_predictor(
    const char* model_path) {
  // model_path null or empty: online learning alone (LLAMALLOC_LEARN without LLAMALLOC_MODEL).
  using namespace llamalloc::model;
  const llamalloc::Options& o = llamalloc::options();
  // Default-initialised (no "()"): value-initialisation would first zero all of the object, 170 KiB of module
  // tables included, and keep those pages resident for the whole run; static storage is zero already.
  auto* predictor = new (g_predictor_storage) LearnedPredictor;
  if (o.predict_log != nullptr && *o.predict_log)
    predictor->set_log_fd(open(o.predict_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  char error[512];
  bool ok = predictor->init(model_path, o.tokens, uint32_t(o.repredict_every), error, sizeof error,
                            unsigned(o.repredict_backoff), unsigned(o.default_class));
  if (!ok) {
    // With LEARN, a bad model file still leaves online learning, which needs none.
    char line[600];
    format_message(line, sizeof line, "llamalloc: warning: %s; running without %s\n", error,
                   o.learn != 0 ? "the model (learning online)" : "predictions");
    llamalloc::write_stderr(line);
    predictor->~LearnedPredictor();
    if (o.learn == 0 || model_path == nullptr || *model_path == '\0') return nullptr;
    predictor = new (g_predictor_storage) LearnedPredictor;
    if (!predictor->init(nullptr, nullptr, uint32_t(o.repredict_every), error, sizeof error,
                         unsigned(o.repredict_backoff), unsigned(o.default_class))) {
      predictor->~LearnedPredictor();
      return nullptr;
    }
  }
  predictor->set_dwarf_unwind(o.predict_dwarf != 0);
  // MIN_CLASS leaves at least two classes in use: with CLASSES=2 every prediction raised to class 1 would put
  // the whole program in the last class.
  unsigned shortest = unsigned(o.min_class);
  if (shortest + 2 > unsigned(o.classes)) shortest = unsigned(o.classes) - 2;
  predictor->set_confidence_rule(ConfidenceRule{unsigned(o.min_confidence), unsigned(o.default_class), shortest});
  predictor->set_unseen_trial(uint32_t(o.unseen_trial));
  if (o.learn != 0) {
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
