// The coordinator's command line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "common/run_flags.h"

namespace dctrain {

struct CoordinatorOptions {
  RunFlags run;  // --config, --out, --resume, --tau, ... (shared with dctrain-launch)
  // ROUTER address workers connect to; loopback unless told otherwise (an
  // address other hosts reach needs CURVE keys or --insecure).
  std::string bind = "tcp://127.0.0.1:5555";
  int workers = 0;  // 0: take the config's value
  int threads = 1;  // compute threads of the coordinator's replica (evaluation)
  std::string log_level = "info";
  bool blas_info = false;  // log the BLAS core and an sgemm figure, then exit
  // CURVE (comm/security.h); override the config's security { } fields.
  std::string secret_key;    // this coordinator's NAME.key
  std::string allowed_keys;  // the workers' public keys: a file, or a folder of NAME.pub
  bool insecure = false;     // allow plain TCP on an address other hosts can reach
};

// Registers every flag, bound to `options`, with its default shown by --help.
void add_coordinator_options(CLI::App& app, CoordinatorOptions& options);

}  // namespace dctrain
