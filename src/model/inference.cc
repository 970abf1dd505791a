// The LSTM forward pass of docs/formats/model.md on the folded table (the LLAMA paper, section 10): per token, one
// H x 4H matrix-vector product and 4H activations, all in float32, on stack buffers. Compiled for x86-64-v3 (AVX2, FMA) with
// a generic fallback chosen at load time (GCC target_clones), so one library runs on any x86-64.
#include <cstring>

#include "model_file.h"

namespace llamalloc::model {

namespace {

// p(r) of fast_exp, given x and n: r = x - n ln2 (ln2 in two parts, so that r is exact), then the polynomial by
// Horner's rule; for a float or for eight (exp8), the same arithmetic.
template <class T>
__attribute__((always_inline)) inline T exp_polynomial(T x, T n) {
  T r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  T p = T{} + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  return p * r + 1.0f;
}

// exp(x) for a vector loop: 2^n * p(r) with x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial (relative error
// about 2e-7, below float32's own rounding of the reference). Branch-free and call-free (the rounding is the
// 1.5 * 2^23 trick, not roundf) so that the loops around it vectorise.
__attribute__((always_inline)) inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
  float t = x * 1.44269504088896341f + shifter;
  float n = t - shifter;
  return exp_polynomial(x, n) * __builtin_bit_cast(float, (int32_t(n) + 127) << 23);
}

__attribute__((always_inline)) inline float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }
__attribute__((always_inline)) inline float tanh_(float x) { return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f); }

}  // namespace

float exp_float(float x) { return fast_exp(x); }

namespace {

// Eight floats (one AVX register; two SSE registers in the generic clone), loaded and stored unaligned.
typedef float v8f __attribute__((vector_size(32), aligned(4)));
typedef int32_t v8i __attribute__((vector_size(32), aligned(4)));

__attribute__((always_inline)) inline v8f splat(float x) { return v8f{} + x; }

// fast_exp on eight lanes (the same arithmetic, lane by lane).
__attribute__((always_inline)) inline v8f exp8(v8f x) {
  x = x < splat(-87.0f) ? splat(-87.0f) : x;
  x = x > splat(88.0f) ? splat(88.0f) : x;
  const v8f shifter = splat(12582912.0f);
  v8f n = (x * 1.44269504088896341f + shifter) - shifter;
  v8i bits = (__builtin_convertvector(n, v8i) + 127) << 23;
  return exp_polynomial(x, n) * __builtin_bit_cast(v8f, bits);
}

__attribute__((always_inline)) inline v8f sigmoid8(v8f x) { return 1.0f / (1.0f + exp8(-x)); }
__attribute__((always_inline)) inline v8f tanh8(v8f x) { return 1.0f - 2.0f / (exp8(2.0f * x) + 1.0f); }

__attribute__((always_inline)) inline v8f load8(const float* p) {
  v8f v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline void store8(float* p, v8f v) { __builtin_memcpy(p, &v, sizeof v); }

// What a step reads of the model: its sizes, the folded input rows (a token's embedding through the input
// weights, plus the bias: 4H floats per token) and the hidden-to-gates weights (H rows of 4H).
struct StepWeights {
  explicit StepWeights(const ModelFile& model)
      : hidden(model.hidden_dim()), four_h(4 * hidden), folded(model.folded()), w_hidden(model.w_hidden()),
        vocab(model.vocab_size()) {}
  // A token's folded row; one outside the vocabulary reads <unk>'s.
  const float* row(uint32_t token) const { return folded + size_t(token < vocab ? token : kUnkToken) * four_h; }

  const unsigned hidden, four_h;
  const float* const folded;
  const float* const w_hidden;
  const uint32_t vocab;
};

// H a multiple of 8 (the models llamalloc trains: 16, 64): z columns in blocks of 32 kept in four registers
// while the H rows of w_hidden stream by, then the gates eight at a time.
__attribute__((target_clones("arch=x86-64-v3", "default")))
void lstm_steps_vector(const ModelFile& model, const uint32_t* tokens, size_t count, float* h, float* c) {
  const StepWeights m(model);
  const unsigned hidden = m.hidden, four_h = m.four_h;
  const float* w_hidden = m.w_hidden;
  // Sized by the model (not kMaxHiddenDim): the stack a model run touches stays resident in every thread.
  auto* z = static_cast<float*>(__builtin_alloca_with_align(four_h * sizeof(float), 512));
  for (size_t t = 0; t < count; ++t) {
    const float* x = m.row(tokens[t]);
    unsigned j0 = 0;
    for (; j0 + 32 <= four_h; j0 += 32) {
      v8f a0 = load8(x + j0), a1 = load8(x + j0 + 8), a2 = load8(x + j0 + 16), a3 = load8(x + j0 + 24);
      const float* row = w_hidden + j0;
      for (unsigned k = 0; k < hidden; ++k, row += four_h) {
        v8f hk = splat(h[k]);
        a0 += hk * load8(row);
        a1 += hk * load8(row + 8);
        a2 += hk * load8(row + 16);
        a3 += hk * load8(row + 24);
      }
      store8(z + j0, a0);
      store8(z + j0 + 8, a1);
      store8(z + j0 + 16, a2);
      store8(z + j0 + 24, a3);
    }
    for (; j0 < four_h; j0 += 8) {
      v8f a = load8(x + j0);
      const float* row = w_hidden + j0;
      for (unsigned k = 0; k < hidden; ++k, row += four_h) a += splat(h[k]) * load8(row);
      store8(z + j0, a);
    }
    // Gates [input, forget, cell, output]: sigmoid, sigmoid, tanh, sigmoid.
    for (unsigned j = 0; j < hidden; j += 8) {
      v8f i = sigmoid8(load8(z + j));
      v8f f = sigmoid8(load8(z + hidden + j));
      v8f g = tanh8(load8(z + 2 * hidden + j));
      v8f o = sigmoid8(load8(z + 3 * hidden + j));
      v8f cj = f * load8(c + j) + i * g;
      store8(c + j, cj);
      store8(h + j, o * tanh8(cj));
    }
  }
}

// Any other H: the same arithmetic, one float at a time.
void lstm_steps_scalar(const ModelFile& model, const uint32_t* tokens, size_t count, float* h, float* c) {
  const StepWeights m(model);
  const unsigned hidden = m.hidden, four_h = m.four_h;
  // Sized by the model (not kMaxHiddenDim): the stack a model run touches stays resident in every thread.
  auto* z = static_cast<float*>(__builtin_alloca_with_align(four_h * sizeof(float), 512));
  for (size_t t = 0; t < count; ++t) {
    const float* x = m.row(tokens[t]);
    for (unsigned j = 0; j < four_h; ++j) z[j] = x[j];
    for (unsigned k = 0; k < hidden; ++k)
      for (unsigned j = 0; j < four_h; ++j) z[j] += h[k] * m.w_hidden[size_t(k) * four_h + j];
    for (unsigned j = 0; j < hidden; ++j) {
      float i = sigmoid(z[j]), f = sigmoid(z[hidden + j]), g = tanh_(z[2 * hidden + j]), o = sigmoid(z[3 * hidden + j]);
      c[j] = f * c[j] + i * g;
      h[j] = o * tanh_(c[j]);
    }
  }
}

void lstm_steps(const ModelFile& model, const uint32_t* tokens, size_t count, float* h, float* c) {
  if (model.hidden_dim() % 8 == 0) lstm_steps_vector(model, tokens, count, h, c);
  else lstm_steps_scalar(model, tokens, count, h, c);
}

}  // namespace

unsigned infer(const ModelFile& model, const uint32_t* tokens, size_t count, float* logits_out) {
  const unsigned hidden = model.hidden_dim();
  auto* h = static_cast<float*>(__builtin_alloca_with_align(hidden * sizeof(float), 512));
  auto* c = static_cast<float*>(__builtin_alloca_with_align(hidden * sizeof(float), 512));
  memset(h, 0, hidden * sizeof(float));
  memset(c, 0, hidden * sizeof(float));
  if (count > model.max_tokens()) count = model.max_tokens();
  lstm_steps(model, tokens, count, h, c);
  const float* w = model.dense_w();
  const float* b = model.dense_b();
  float logits[kNumClasses];
  for (unsigned k = 0; k < kNumClasses; ++k) logits[k] = b[k];
  for (unsigned j = 0; j < hidden; ++j)
    for (unsigned k = 0; k < kNumClasses; ++k) logits[k] += h[j] * w[j * kNumClasses + k];
  if (logits_out != nullptr) memcpy(logits_out, logits, sizeof logits);
  return model.decide(logits);
}

float top_probability(const float* logits, unsigned best) {
  // 1 / sum_k exp(l_k - l_best): every term is at most 1, so nothing overflows.
  float sum = 0.0f;
  for (unsigned k = 0; k < kNumClasses; ++k) sum += fast_exp(logits[k] - logits[best]);
  return 1.0f / sum;
}

float top_two_probability(const float* logits) {
  unsigned first = 0, second = 1;
  if (logits[1] > logits[0]) first = 1, second = 0;
  for (unsigned k = 2; k < kNumClasses; ++k) {
    if (logits[k] > logits[first]) second = first, first = k;
    else if (logits[k] > logits[second]) second = k;
  }
  float sum = 0.0f;
  for (unsigned k = 0; k < kNumClasses; ++k) sum += fast_exp(logits[k] - logits[first]);
  return (1.0f + fast_exp(logits[second] - logits[first])) / sum;
}

}  // namespace llamalloc::model
