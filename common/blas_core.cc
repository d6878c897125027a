#include "common/blas_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace dctrain {

namespace {

// OpenBLAS's x86 cores whose kernels use SSE at most, as
// openblas_get_corename() names them ("Unknown" when it could not place the
// CPU; "generic" from builds without per-CPU kernels).
constexpr std::array<std::string_view, 18> kSseCores = {
    "generic", "Unknown", "Katmai",        "Coppermine", "Northwood",  "Prescott",
    "Banias",  "Atom",    "Core2",         "Penryn",     "Dunnington", "Nehalem",
    "Athlon",  "Opteron", "Opteron(SSE3)", "Barcelona",  "Nano",       "Bobcat"};

}  // namespace

bool same_blas_core(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string describe(const CpuFeatures& cpu) {
  if (cpu.avx512()) return "AVX-512";
  if (cpu.avx2 && cpu.fma) return "AVX2";
  if (cpu.avx) return "AVX";
  if (cpu.sse4_2) return "SSE4.2";
  if (cpu.sse3) return "SSE3";
  return "baseline x86-64";
}

bool is_sse_blas_core(std::string_view core) {
  return std::any_of(kSseCores.begin(), kSseCores.end(),
                     [&](std::string_view c) { return same_blas_core(c, core); });
}

BlasCoreChoice choose_blas_core(std::string_view reported, const CpuFeatures& cpu,
                                const std::optional<std::string>& user_value) {
  if (user_value) return {false, "", fmt::format("set by OPENBLAS_CORETYPE={}", *user_value)};
  if (!is_sse_blas_core(reported)) return {false, "", "as detected"};
  const char* wider = cpu.avx512()          ? "SkylakeX"
                      : cpu.avx2 && cpu.fma ? "Haswell"
                      : cpu.avx             ? "Sandybridge"
                                            : nullptr;
  if (wider == nullptr) return {false, "", "as detected"};
  return {true, wider,
          fmt::format("the library reported {} on an {} CPU", reported, describe(cpu))};
}

const char* to_string(BlasCoreSource source) {
  switch (source) {
    case BlasCoreSource::kDetected:
      return "detected";
    case BlasCoreSource::kChosen:
      return "chosen";
    case BlasCoreSource::kEnvironment:
      return "environment";
  }
  return "detected";
}

BlasReport make_blas_report(const BlasProbe& probe) {
  BlasReport r;
  r.config = probe.config;
  // openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ... Haswell MAX_THREADS=64".
  const size_t first = probe.config.find(' ');
  const size_t second = first == std::string::npos ? first : probe.config.find(' ', first + 1);
  r.library = probe.config.substr(0, second);
  r.core = probe.reported_core;
  r.detected_core = probe.reported_core;
  r.cpu_model = probe.cpu_model;
  r.cpu_features = describe(probe.cpu);
  r.threads = probe.threads;
  if (!probe.coretype) {
    r.source = BlasCoreSource::kDetected;
    r.why = "as detected";
    return r;
  }
  r.coretype = *probe.coretype;
  if (probe.detected_core) {
    r.source = BlasCoreSource::kChosen;
    r.detected_core = *probe.detected_core;
    r.why = fmt::format("chosen: the library reported {} on an {} CPU", r.detected_core,
                        r.cpu_features);
  } else {
    r.source = BlasCoreSource::kEnvironment;
    r.why = fmt::format("set by OPENBLAS_CORETYPE={}", r.coretype);
  }
  if (!same_blas_core(r.core, r.coretype)) {
    // OpenBLAS takes an unknown name, or a core this build lacks, without a
    // word and runs whatever it falls back to; a build without DYNAMIC_ARCH
    // ignores the variable altogether.
    r.warning = fmt::format(
        "OPENBLAS_CORETYPE={} but the library runs its {} kernels: {} does not know that name, "
        "lacks that core, or was built without DYNAMIC_ARCH and ignores the variable; names as "
        "openblas_get_corename() prints them: SkylakeX, Haswell, Zen, Sandybridge, Prescott, ...",
        r.coretype, r.core, r.library);
  }
  return r;
}

std::string describe(const BlasReport& r) {
  return fmt::format("{}, core {} ({}), {} thread{}; CPU {} ({})", r.library, r.core, r.why,
                     r.threads, r.threads == 1 ? "" : "s", r.cpu_model, r.cpu_features);
}

std::string describe_sgemm(const BlasReport& r) {
  if (r.sgemm_size == 0) return "";
  return fmt::format("sgemm {}^3, {} thread{}: {:.1f} GFLOP/s (measured in {:.0f} ms)",
                     r.sgemm_size, r.sgemm_threads, r.sgemm_threads == 1 ? "" : "s", r.sgemm_gflops,
                     1e3 * r.sgemm_seconds);
}

}  // namespace dctrain
