// Multi-head self-attention with a padding mask, as in BERT's self-attention
// block: Q/K/V projections, scaled dot products, a softmax over the keys with
// padded keys masked out, dropout on the attention probabilities, the heads'
// contexts concatenated and an output projection. The residual connection,
// hidden dropout and LayerNorm around it belong to the model.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dctrain {

// Added to the score of a padded key before the softmax (BERT's value): its
// probability underflows to exactly 0 whenever a sequence has a real token.
inline constexpr double kAttentionMaskScore = -10000.0;

// Weights in nn.Linear layout: w* (hidden, hidden), b* (hidden).
template <typename T>
struct AttentionParams {
  const T *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;
};
template <typename T>
struct AttentionGrads {
  T *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;
};

// What forward saves for backward.
template <typename T>
struct AttentionSaved {
  T* q;        // (n, t, hidden) projections
  T* k;        // (n, t, hidden)
  T* v;        // (n, t, hidden)
  T* probs;    // (n, heads, t, t) softmax output, before dropout
  T* context;  // (n, t, hidden) heads' outputs, concatenated
};

// Dropout on the attention probabilities: sequence s, head h draws its mask
// from hash_key({keys[s], h}). keys may be null when p = 0.
struct AttentionDropout {
  double p = 0.0;
  const uint64_t* keys = nullptr;  // (n)
};

// Floats of scratch that forward and backward need.
size_t attention_forward_scratch(int t);
size_t attention_backward_scratch(int n, int t, int hidden);

// y (n, t, hidden) from x (n, t, hidden); attention (n, t): 1 = real token,
// 0 = padding (masked as a key). hidden must be a multiple of heads.
template <typename T>
void attention_forward(T* y, const AttentionSaved<T>& saved, T* scratch, const T* x,
                       const uint8_t* attention, const AttentionParams<T>& params,
                       const AttentionDropout& dropout, int n, int t, int hidden, int heads);

// dx (n, t, hidden) OVERWRITTEN (skipped when null); parameter gradients ADDED.
template <typename T>
void attention_backward(T* dx, const AttentionGrads<T>& grads, T* scratch, const T* dy,
                        const AttentionSaved<T>& saved, const T* x,
                        const AttentionParams<T>& params, const AttentionDropout& dropout, int n,
                        int t, int hidden, int heads);

}  // namespace dctrain
