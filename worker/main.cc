// dctrain-worker: thin main over the worker library.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <optional>

#include "common/allocator.h"
#include "common/blas_runtime.h"
#include "common/cli.h"
#include "common/exit_codes.h"
#include "runtime/blas_info.h"
#include "worker/options.h"
#include "worker/worker.h"

int main(int argc, char** argv) {
  CLI::App app{"dctrain-worker: computes micro-batches for a dctrain-coordinator"};
  dctrain::WorkerOptions options;
  dctrain::add_worker_options(app, options);
  dctrain::add_examples(app,
                        {"dctrain-worker --connect tcp://127.0.0.1:5555 --data-dir ../shared/data",
                         "dctrain-worker --connect tcp://hostA:5555 --name worker-0 --secret-key "
                         "keys/worker-0.key --coordinator-key keys/coordinator.pub --data-dir "
                         "../shared/data"});
  if (const std::optional<int> status = dctrain::parse_command_line(app, argc, argv))
    return *status;
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
  } catch (const dctrain::UsageError& e) {
    spdlog::error("{}", e.what());
    return dctrain::kExitUsage;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return dctrain::kWorkerFailed;
  }
}
