// dctrain-coordinator: thin main over the coordinator library.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "common/allocator.h"
#include "common/blas_runtime.h"
#include "common/cli.h"
#include "coordinator/program/options.h"
#include "coordinator/program/program.h"

int main(int argc, char** argv) {
  CLI::App app{"dctrain-coordinator: runs a training job for N dctrain-worker processes"};
  dctrain::CoordinatorOptions options;
  dctrain::add_coordinator_options(app, options);
  dctrain::add_examples(app, {"dctrain-coordinator --config experiments/mnist-cnn.cfg --bind "
                              "tcp://127.0.0.1:5555 --data-dir ../shared/data --out runs/mnist",
                              "dctrain-coordinator --config experiments/mnist-cnn.cfg --bind "
                              "'tcp://*:5555' --data-dir ../shared/data --secret-key "
                              "keys/coordinator.key --allowed-keys keys/allowed",
                              "dctrain-coordinator --resume runs/mnist --bind tcp://127.0.0.1:5555 "
                              "--data-dir ../shared/data"});
  if (const std::optional<int> status = dctrain::parse_command_line(app, argc, argv))
    return *status;
  dctrain::apply_log_level(options.log_level);
  // Megabyte messages every step: reuse their memory (common/allocator.h).
  dctrain::tune_allocator();
  // Before any other work: this may run the program again from the start on
  // a wider OpenBLAS core.
  dctrain::BlasReport blas = dctrain::settle_blas_core(argv);
  dctrain::measure_sgemm_peak(blas);
  if (options.blas_info) {
    dctrain::log_blas(*spdlog::default_logger(), blas);
    return 0;
  }
  return dctrain::run_coordinator(options, blas);
}
