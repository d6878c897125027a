// dctrain-coordinator: thin main over the coordinator library.
#include <CLI/CLI.hpp>

#include "common/cli.h"
#include "coordinator/options.h"
#include "coordinator/program.h"

int main(int argc, char** argv) {
  CLI::App app{"dctrain-coordinator: runs a training job for N dctrain-worker processes"};
  dctrain::CoordinatorOptions options;
  dctrain::add_coordinator_options(app, options);
  CLI11_PARSE(app, argc, argv);
  dctrain::apply_log_level(options.log_level);
  return dctrain::run_coordinator(options);
}
