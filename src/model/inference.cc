// The LSTM forward pass of docs/formats/model.md on the folded table (papers/000 section 10): per token, one
// H x 4H matrix-vector product and 4H activations, all in float32, on stack buffers. Compiled for AVX2+FMA with
// a generic fallback chosen at load time (GCC target_clones), so one library runs on any x86-64.
#include <cstring>

#include "model_file.h"

namespace llamalloc::model {

namespace {

// exp(x) for a vector loop: 2^n * p(r) with x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial (relative error
// about 2e-7, below float32's own rounding of the reference). Branch-free so that it vectorises.
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  float n = __builtin_roundf(x * 1.44269504088896341f);
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }
inline float tanh_(float x) { return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f); }

__attribute__((target_clones("arch=haswell", "default")))
void lstm_steps(const ModelFile& model, const uint32_t* tokens, size_t count, float* h, float* c) {
  const unsigned hidden = model.hidden_dim();
  const unsigned four_h = 4 * hidden;
  const float* folded = model.folded();
  const float* w_hidden = model.w_hidden();
  const uint32_t vocab = model.vocab_size();
  alignas(64) float z[4 * kMaxHiddenDim];
  for (size_t t = 0; t < count; ++t) {
    uint32_t token = tokens[t] < vocab ? tokens[t] : kUnkToken;
    const float* x = folded + size_t(token) * four_h;
    for (unsigned j = 0; j < four_h; ++j) z[j] = x[j];
    for (unsigned k = 0; k < hidden; ++k) {
      const float hk = h[k];
      const float* row = w_hidden + size_t(k) * four_h;
      for (unsigned j = 0; j < four_h; ++j) z[j] += hk * row[j];
    }
    for (unsigned j = 0; j < hidden; ++j) {
      float i = sigmoid(z[j]);
      float f = sigmoid(z[hidden + j]);
      float g = tanh_(z[2 * hidden + j]);
      float o = sigmoid(z[3 * hidden + j]);
      c[j] = f * c[j] + i * g;
      h[j] = o * tanh_(c[j]);
    }
  }
}

}  // namespace

unsigned infer(const ModelFile& model, const uint32_t* tokens, size_t count, float* logits_out) {
  const unsigned hidden = model.hidden_dim();
  alignas(64) float h[kMaxHiddenDim] = {};
  alignas(64) float c[kMaxHiddenDim] = {};
  if (count > model.max_tokens()) count = model.max_tokens();
  lstm_steps(model, tokens, count, h, c);
  const float* w = model.dense_w();
  const float* b = model.dense_b();
  float logits[kNumClasses];
  for (unsigned k = 0; k < kNumClasses; ++k) logits[k] = b[k];
  for (unsigned j = 0; j < hidden; ++j)
    for (unsigned k = 0; k < kNumClasses; ++k) logits[k] += h[j] * w[j * kNumClasses + k];
  unsigned best = 0;
  for (unsigned k = 1; k < kNumClasses; ++k)
    if (logits[k] > logits[best]) best = k;
  if (logits_out != nullptr) memcpy(logits_out, logits, sizeof logits);
  return best;
}

}  // namespace llamalloc::model
