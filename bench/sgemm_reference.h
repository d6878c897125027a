// The dense-math ceiling that benchmarks quote their GFLOP/s against:
// OpenBLAS cblas_sgemm on square matrices, measured in the benchmark's own
// run; and the line that says which CPU and OpenBLAS core it ran on.
#pragma once

#include <cblas.h>

#include <chrono>
#include <cstdio>

#include "common/blas_runtime.h"

namespace dctrain::bench {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best-of-`repeats` GFLOP/s of an n x n x n sgemm with `threads` BLAS threads
// (after one warm-up call). Leaves OpenBLAS at `threads`.
inline double sgemm_gflops(int n, int threads, int repeats) {
  openblas_set_num_threads(threads);
  return dctrain::sgemm_gflops(n, repeats);
}

// Call first in main: settles the OpenBLAS core as the programs do
// (common/blas_runtime.h; this may run the benchmark again from the start)
// and prints the CPU and the core its figures come from.
inline BlasReport settle_and_print_blas(char** argv) {
  const BlasReport blas = settle_blas_core(argv);
  std::printf("BLAS: %s\n", describe(blas).c_str());
  if (!blas.warning.empty()) std::printf("BLAS warning: %s\n", blas.warning.c_str());
  std::fflush(stdout);
  return blas;
}

}  // namespace dctrain::bench
