#include "common/blas_runtime.h"

#include <cblas.h>
#include <fmt/format.h>
#include <spdlog/logger.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

namespace dctrain {

namespace {

constexpr const char* kCoretypeVariable = "OPENBLAS_CORETYPE";
constexpr const char* kDetectedVariable = "DCTRAIN_BLAS_DETECTED_CORE";

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::nullopt : std::optional<std::string>(value);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t begin = line.find_first_not_of(" \t", colon + 1);
    return begin == std::string::npos ? std::string("unknown") : line.substr(begin);
  }
  return "unknown";
}

CpuFeatures cpu_features() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.sse3 = __builtin_cpu_supports("sse3");
  f.ssse3 = __builtin_cpu_supports("ssse3");
  f.sse4_1 = __builtin_cpu_supports("sse4.1");
  f.sse4_2 = __builtin_cpu_supports("sse4.2");
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512cd = __builtin_cpu_supports("avx512cd");
  return f;
}

BlasProbe probe_blas() {
  BlasProbe p;
  p.reported_core = openblas_get_corename();
  p.config = openblas_get_config();
  p.threads = openblas_get_num_threads();
  p.coretype = environment(kCoretypeVariable);
  p.detected_core = environment(kDetectedVariable);
  p.cpu = cpu_features();
  p.cpu_model = cpu_model_name();
  return p;
}

BlasReport settle_blas_core(char** argv) {
  return settle_blas_core(argv, probe_blas());
}

BlasReport settle_blas_core(char** argv, const BlasProbe& probe) {
  // Only the re-executed image reads it; nothing started from here inherits it.
  ::unsetenv(kDetectedVariable);
  BlasProbe seen = probe;
  if (!seen.coretype) seen.detected_core.reset();  // meaningless without the variable it explains
  const BlasCoreChoice choice = choose_blas_core(seen.reported_core, seen.cpu, seen.coretype);
  if (!choice.override) return make_blas_report(seen);

  ::setenv(kCoretypeVariable, choice.core.c_str(), 1);
  ::setenv(kDetectedVariable, seen.reported_core.c_str(), 1);
  std::fflush(nullptr);
  ::execv("/proc/self/exe", argv);
  // Still here: the program runs on the library's own core.
  const int error = errno;
  ::unsetenv(kCoretypeVariable);
  ::unsetenv(kDetectedVariable);
  BlasReport r = make_blas_report(seen);
  r.warning = fmt::format(
      "could not re-execute /proc/self/exe ({}) to switch OpenBLAS from its {} kernels to {} "
      "({}): BLAS runs several times slower than this CPU allows; start the program with "
      "OPENBLAS_CORETYPE={} in its environment",
      std::strerror(error), seen.reported_core, choice.core, choice.why, choice.core);
  return r;
}

double sgemm_gflops(int n, int repeats, double budget_seconds) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  auto once = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  const auto begin = std::chrono::steady_clock::now();
  once();  // first touch of the buffers and of the library's own work space
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    best = std::min(best, seconds_since(t0));
    if (seconds_since(begin) > budget_seconds) break;
  }
  return 2.0 * n * n * static_cast<double>(n) / best * 1e-9;
}

void log_blas(spdlog::logger& log, const BlasReport& report) {
  log.info("BLAS: {}", describe(report));
  if (report.sgemm_size > 0) log.info("BLAS: {}", describe_sgemm(report));
  if (!report.warning.empty()) log.warn("BLAS: {}", report.warning);
}

void measure_sgemm_peak(BlasReport& report) {
  constexpr int kSize = 512;
  constexpr int kRepeats = 5;
  constexpr double kBudgetSeconds = 0.2;
  openblas_set_num_threads(1);
  const auto t0 = std::chrono::steady_clock::now();
  report.sgemm_gflops = sgemm_gflops(kSize, kRepeats, kBudgetSeconds);
  report.sgemm_seconds = seconds_since(t0);
  report.sgemm_size = kSize;
  report.sgemm_threads = 1;
  report.threads = openblas_get_num_threads();
}

}  // namespace dctrain
