// The machine's dense-math ceiling: OpenBLAS cblas_sgemm GFLOP/s at 1 and 2
// threads on square matrices. Other benchmarks quote their GFLOP/s as a
// fraction of this figure, measured in their own run.
#include <cstdio>

#include "bench/sgemm_reference.h"

int main(int, char** argv) {
  dctrain::bench::settle_and_print_blas(argv);
  constexpr int kN = 2048;
  std::printf(
      "cblas_sgemm %dx%dx%d, best of 5 (machine shared with other processes: "
      "figures are noisy)\n",
      kN, kN, kN);
  const double one = dctrain::bench::sgemm_gflops(kN, 1, 5);
  const double two = dctrain::bench::sgemm_gflops(kN, 2, 5);
  std::printf("1 thread : %7.1f GFLOP/s\n", one);
  std::printf("2 threads: %7.1f GFLOP/s\n", two);
  std::printf("ratio 2 threads / 1 thread: %.2fx\n", two / one);
  return 0;
}
