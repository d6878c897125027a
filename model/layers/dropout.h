// Inverted dropout whose mask is a pure function of (key, element index): the
// same key gives the same mask on every replica, in every rerun, and again in
// backward, so the mask is recomputed rather than stored. Callers derive the
// key from the model seed, the sample and the dropout site.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dctrain {

// Whether element `index` survives under `key` with drop probability p: the
// element's 32-bit lane of the SplitMix64 stream started at `key` (two
// elements per 64-bit draw) compared against p * 2^32.
bool dropout_keeps(uint64_t key, size_t index, double p);

// y (count) = x * mask / (1 - p); y may alias x. p = 0 copies; p must be < 1.
template <typename T>
void dropout_forward(T* y, const T* x, double p, uint64_t key, size_t count);

// dx (count) = dy * mask / (1 - p) with the forward's mask; dx may alias dy.
template <typename T>
void dropout_backward(T* dx, const T* dy, double p, uint64_t key, size_t count);

}  // namespace dctrain
