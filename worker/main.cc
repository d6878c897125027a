// dctrain-worker: thin main over the worker library.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "comm/blas_info.h"
#include "common/allocator.h"
#include "common/blas_runtime.h"
#include "common/cli.h"
#include "worker/options.h"
#include "worker/worker.h"

int main(int argc, char** argv) {
  CLI::App app{"dctrain-worker: computes micro-batches for a dctrain-coordinator"};
  dctrain::WorkerOptions options;
  dctrain::add_worker_options(app, options);
  CLI11_PARSE(app, argc, argv);
  dctrain::apply_log_level(options.log_level);
  // Megabyte messages every step: reuse their memory (common/allocator.h).
  dctrain::tune_allocator();
  // Before any other work: this may run the program again from the start on
  // a wider OpenBLAS core.
  dctrain::BlasReport blas = dctrain::settle_blas_core(argv);
  dctrain::measure_sgemm_peak(blas);
  dctrain::log_blas(*spdlog::default_logger(), blas);
  if (options.blas_info) return 0;
  try {
    return dctrain::run_worker(options, dctrain::to_proto(blas), spdlog::default_logger());
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return dctrain::kWorkerFailed;
  }
}
