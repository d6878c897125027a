// The machine's dense-math ceiling: OpenBLAS cblas_sgemm GFLOP/s at 1 and 2
// threads on square matrices. Other benchmarks quote their GFLOP/s as a
// fraction of this figure, measured in their own run.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

double sgemm_gflops(int n, int threads, int repeats) {
  openblas_set_num_threads(threads);
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  auto once = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  once();  // warm-up: thread start, page faults
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
  }
  return 2.0 * n * n * static_cast<double>(n) / best * 1e-9;
}

}  // namespace

int main() {
  constexpr int kN = 2048;
  std::printf("cblas_sgemm %dx%dx%d, best of 5 (machine shared with other processes: "
              "figures are noisy)\n", kN, kN, kN);
  const double one = sgemm_gflops(kN, 1, 5);
  const double two = sgemm_gflops(kN, 2, 5);
  std::printf("1 thread : %7.1f GFLOP/s\n", one);
  std::printf("2 threads: %7.1f GFLOP/s\n", two);
  std::printf("ratio 2 threads / 1 thread: %.2fx\n", two / one);
  return 0;
}
