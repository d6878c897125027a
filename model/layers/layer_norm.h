// Layer normalisation over the last dimension (PyTorch's nn.LayerNorm with an
// affine transform): y = (x - mean) / sqrt(var + eps) * gamma + beta, var the
// biased variance. BERT uses eps = 1e-12.
#pragma once

namespace dctrain {

inline constexpr double kBertLayerNormEps = 1e-12;

// y (n, dim); saves mean (n) and rstd (n) = 1 / sqrt(var + eps) for backward.
template <typename T>
void layer_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* gamma, const T* beta, int n,
                        int dim, double eps);

// dx (n, dim) (skipped when null; may alias dy); dgamma (dim) +=; dbeta (dim) +=.
template <typename T>
void layer_norm_backward(T* dx, T* dgamma, T* dbeta, const T* dy, const T* mean, const T* rstd,
                         const T* x, const T* gamma, int n, int dim);

}  // namespace dctrain
