// Which OpenBLAS core a program should run on. OpenBLAS picks its kernels
// ("core") when the library loads, from the CPU it recognises; on a CPU it
// does not know (a new Intel model under a hypervisor, say) it falls back to
// a generic SSE core such as Prescott, which runs sgemm several times slower
// than the AVX2 or AVX-512 kernels the CPU could run. The only remedy is the
// OPENBLAS_CORETYPE environment variable, read once at load time.
//
// This file holds the decision, as a pure function of what the library
// reported, what the CPU offers and what the user set, so it is tested on a
// table of cases, and the report programs log and record;
// common/blas_runtime.h asks the library and the CPU and acts on it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dctrain {

// Instruction-set extensions that decide which OpenBLAS kernels a CPU can run
// (as __builtin_cpu_supports reports them: usable, the OS saving their state).
struct CpuFeatures {
  bool sse3 = false, ssse3 = false, sse4_1 = false, sse4_2 = false;
  bool avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512cd = false;

  // Everything OpenBLAS's SkylakeX kernels use.
  bool avx512() const { return avx512f && avx512bw && avx512vl && avx512dq && avx512cd; }
};

// The widest class of kernels the CPU runs, for logs: "AVX-512", "AVX2",
// "AVX", "SSE4.2", "SSE3" or "baseline x86-64".
std::string describe(const CpuFeatures& cpu);

// True for OpenBLAS's generic and SSE-only x86 cores (Prescott, Core2,
// Penryn, Dunnington, Nehalem, Atom, Nano, Barcelona, Opteron, ... and
// "generic"/"unknown"). Case-insensitive, like OPENBLAS_CORETYPE.
bool is_sse_blas_core(std::string_view core);

struct BlasCoreChoice {
  // True: re-run the program with OPENBLAS_CORETYPE=core. False: keep what
  // the library chose (or what the user set).
  bool override = false;
  std::string core;  // override: the OPENBLAS_CORETYPE value
  std::string why;   // for the log line, e.g. "the library reported Prescott on an AVX-512 CPU"
};

// The decision. `reported` is openblas_get_corename() of the library as
// loaded, `user_value` OPENBLAS_CORETYPE when it is in the environment.
//  - A value the user set is kept, whatever it is.
//  - Only a generic or SSE core is overridden, and only when the CPU offers
//    wider kernels: SkylakeX on AVX-512 (F, BW, VL, DQ, CD), else Haswell on
//    AVX2 + FMA, else Sandybridge on AVX. That fallback is the large loss
//    (sgemm 4-6 times slower). Any other core the library chose (Haswell or
//    Zen on an AVX-512 CPU, say) is kept: it runs vector kernels the CPU
//    has, and whether the AVX-512 ones beat them depends on the CPU (on an
//    AMD EPYC of family 26, SkylakeX sgemm runs at 1.9 times Haswell's).
//    That is a measurement for the user to make (bench_sgemm_peak) and act
//    on with OPENBLAS_CORETYPE, not a guess to make at every start.
BlasCoreChoice choose_blas_core(std::string_view reported, const CpuFeatures& cpu,
                                const std::optional<std::string>& user_value);

// Case-insensitive equality of core names ("SkylakeX" == "skylakex").
bool same_blas_core(std::string_view a, std::string_view b);

// What a process finds at start-up (common/blas_runtime.h reads it).
struct BlasProbe {
  std::string reported_core;                 // openblas_get_corename() of the library as loaded
  std::string config;                        // openblas_get_config()
  int threads = 0;                           // openblas_get_num_threads()
  std::optional<std::string> coretype;       // OPENBLAS_CORETYPE, when in the environment
  std::optional<std::string> detected_core;  // DCTRAIN_BLAS_DETECTED_CORE, when in the environment
  CpuFeatures cpu;
  std::string cpu_model;  // "model name" of /proc/cpuinfo
};

// How the core in use came to be.
enum class BlasCoreSource {
  kDetected,     // the library's own pick
  kChosen,       // the program re-executed itself with OPENBLAS_CORETYPE set
  kEnvironment,  // OPENBLAS_CORETYPE set by the user
};

// "detected", "chosen", "environment" (the "how" of summary.json).
const char* to_string(BlasCoreSource source);

struct BlasReport {
  std::string library;  // "OpenBLAS 0.3.21"
  std::string config;   // openblas_get_config()
  std::string core;     // the core in use
  BlasCoreSource source = BlasCoreSource::kDetected;
  std::string detected_core;  // the library's own pick (kChosen: before the re-execution)
  std::string coretype;       // OPENBLAS_CORETYPE in force; empty: not set
  std::string why;            // the log line's parenthesis: "as detected", ...
  std::string warning;        // non-empty: a problem the user should act on
  std::string cpu_model;      // "model name" of /proc/cpuinfo
  std::string cpu_features;   // describe(CpuFeatures): "AVX-512", "AVX2", ...
  int threads = 0;            // BLAS threads
  int sgemm_size = 0;         // n of the n x n x n sgemm timed at start; 0: not timed
  double sgemm_gflops = 0.0;  // its best GFLOP/s, at sgemm_threads
  int sgemm_threads = 0;
  double sgemm_seconds = 0.0;  // wall time the measurement took
};

// The report of a process that runs on: one that keeps the library's core,
// runs on a core the user set, or is the re-executed image (OPENBLAS_CORETYPE
// and DCTRAIN_BLAS_DETECTED_CORE both set). Notes when the library runs
// another core than OPENBLAS_CORETYPE names (an unknown name, a core this
// build lacks).
BlasReport make_blas_report(const BlasProbe& probe);

// One line for logs: "OpenBLAS 0.3.21, core Haswell (as detected), 1 thread;
// CPU AMD EPYC (AVX-512)".
std::string describe(const BlasReport& report);
// The start-up sgemm figure: "sgemm 512^3, 1 thread: 101.2 GFLOP/s (measured
// in 48 ms)", or "" when none was measured.
std::string describe_sgemm(const BlasReport& report);

}  // namespace dctrain
