// The dense-math ceiling that benchmarks quote their GFLOP/s against:
// OpenBLAS cblas_sgemm on square matrices, measured in the benchmark's own run.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace dctrain::bench {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best-of-`repeats` GFLOP/s of an n x n x n sgemm with `threads` BLAS threads
// (after one warm-up call). Leaves OpenBLAS at `threads`.
inline double sgemm_gflops(int n, int threads, int repeats) {
  openblas_set_num_threads(threads);
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  auto once = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  once();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * n * n * static_cast<double>(n) / best * 1e-9;
}

}  // namespace dctrain::bench
