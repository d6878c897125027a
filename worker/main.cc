// dctrain-worker: thin main over the worker library.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "common/cli.h"
#include "worker/options.h"
#include "worker/worker.h"

int main(int argc, char** argv) {
  CLI::App app{"dctrain-worker: computes micro-batches for a dctrain-coordinator"};
  dctrain::WorkerOptions options;
  dctrain::add_worker_options(app, options);
  CLI11_PARSE(app, argc, argv);
  dctrain::apply_log_level(options.log_level);
  try {
    return dctrain::run_worker(options, spdlog::default_logger());
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return dctrain::kWorkerFailed;
  }
}
