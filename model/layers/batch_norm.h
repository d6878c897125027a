// BatchNorm2d over (N, C, H, W) with PyTorch's semantics: training normalises
// with the batch mean and the biased batch variance; the running estimates
// are updated from the batch mean and the UNBIASED batch variance with
// momentum 0.1 (done by the model, which exchanges the statistics, see
// model.h); evaluation normalises with the running estimates. eps = 1e-5.
//
// Conventions as in linear.h. To let a model split the work over threads, the
// shape carries a channel range: a call touches only channels
// [channel_begin, channel_end) of every buffer.
#pragma once

#include <cstdint>

namespace dctrain {

inline constexpr double kBatchNormEps = 1e-5;
inline constexpr double kBatchNormMomentum = 0.1;

struct BatchNormShape {
  int n = 1;         // samples
  int channels = 1;  // C
  int spatial = 1;   // H * W
  int channel_begin = 0;
  int channel_end = -1;  // -1: all channels

  int end() const { return channel_end < 0 ? channels : channel_end; }
};

// y (N, C, HW) = gamma * (x - mean) / sqrt(var + eps) + beta with the batch's
// statistics, which are written to mean (C) and var (C, biased: divided by
// N * HW) and saved for backward. y may alias x.
template <typename T>
void batch_norm_forward_train(T* y, T* mean, T* var, const T* x, const T* gamma, const T* beta,
                              const BatchNormShape& s);

// Evaluation: the same with the running mean (C) and running var (C).
template <typename T>
void batch_norm_forward_eval(T* y, const T* x, const T* gamma, const T* beta, const T* running_mean,
                             const T* running_var, const BatchNormShape& s);

// Backward of the training forward (statistics depend on x).
// dx (N, C, HW) overwritten (skipped when null; may alias dy); dgamma (C) +=,
// dbeta (C) +=; mean, var as saved by the forward; x its input.
template <typename T>
void batch_norm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* mean, const T* var,
                         const T* x, const T* gamma, const BatchNormShape& s);

}  // namespace dctrain
