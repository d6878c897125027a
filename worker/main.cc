// dctrain-worker: thin main over the worker library.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>

#include "common/cli.h"
#include "worker/options.h"

int main(int argc, char** argv) {
  CLI::App app{"dctrain-worker: computes micro-batches for a dctrain-coordinator"};
  dctrain::WorkerOptions options;
  dctrain::add_worker_options(app, options);
  CLI11_PARSE(app, argc, argv);
  dctrain::apply_log_level(options.log_level);

  spdlog::error("{}: the training runtime is not part of this build yet; only --help and "
                "--version work",
                dctrain::version_line("dctrain-worker"));
  return 2;
}
