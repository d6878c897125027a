// What OpenBLAS runs on in this process, settled at start-up: asks the
// library which core (kernel set) it picked and the CPU what it offers, and
// when the library fell back to a generic or SSE core on a CPU with AVX or
// better (choose_blas_core() in common/blas_core.h decides), sets
// OPENBLAS_CORETYPE and runs the program again from the start: OpenBLAS reads
// the variable only when it loads, so nothing short of a fresh process image
// changes its kernels.
//
// The re-executed image finds OPENBLAS_CORETYPE set and never re-executes
// again, so a program runs at most twice. A value the user set is never
// overridden. DCTRAIN_BLAS_DETECTED_CORE carries the core the library had
// picked by itself into the re-executed image, for the log line only; it is
// removed from the environment there, so no child process inherits it.
#pragma once

#include <spdlog/logger.h>

#include "common/blas_core.h"

namespace dctrain {

// Reads the library, the CPU and the environment.
BlasProbe probe_blas();

// Call first thing in main, before any BLAS work and before threads or files
// are opened. When choose_blas_core() says to override, sets
// OPENBLAS_CORETYPE (and DCTRAIN_BLAS_DETECTED_CORE) and execv()s
// /proc/self/exe with `argv`: it does not return then, unless the execv
// fails (the report then carries a warning and the library's own core).
BlasReport settle_blas_core(char** argv);
// The same on a given probe: the tests fake the reported core through it.
BlasReport settle_blas_core(char** argv, const BlasProbe& probe);

// Best GFLOP/s over up to `repeats` n x n x n cblas_sgemm calls (after one
// untimed warm-up) at the library's current thread count, stopping early
// once `budget_seconds` have passed since the warm-up began.
double sgemm_gflops(int n, int repeats, double budget_seconds = 1e30);

// A quick sgemm figure at one BLAS thread (512^3, best of up to 5 within
// about 0.2 s: tens of milliseconds on AVX2 kernels), recorded in `report`.
// Leaves OpenBLAS at one thread, as the compute threads run it
// (model/thread_pool.h).
void measure_sgemm_peak(BlasReport& report);

// Logs the report: "BLAS: <describe()>" and the sgemm figure at info, a
// warning at warn.
void log_blas(spdlog::logger& log, const BlasReport& report);

// "model name" of the first processor in /proc/cpuinfo ("unknown" if none).
std::string cpu_model_name();
// What this CPU offers, by __builtin_cpu_supports.
CpuFeatures cpu_features();

}  // namespace dctrain
