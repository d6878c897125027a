// The coordinator's command line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace dctrain {

struct CoordinatorOptions {
  std::string config_path;  // run config, Protobuf text format
  // ROUTER address workers connect to; loopback unless told otherwise (an
  // address other hosts reach needs CURVE keys or --insecure).
  std::string bind = "tcp://127.0.0.1:5555";
  // Run folder: config, metrics, summary, logs; empty: a new one under runs/.
  std::string out_dir;
  bool overwrite = false;               // --out may hold another run, whose files are replaced
  std::string resume_dir;               // continue from this run folder's checkpoint
  int workers = 0;                      // 0: take the config's value
  std::string tau;                      // "": config's; seconds, "inf" or "auto"
  int64_t steps = 0;                    // 0: config's max steps
  std::string data_dir;                 // data root for the held-out split; empty: synthetic only
  int threads = 1;                      // compute threads of the coordinator's replica (evaluation)
  std::string log_level = "info";
  bool blas_info = false;  // log the BLAS core and an sgemm figure, then exit
  int metrics_port = -1;   // Prometheus metrics over HTTP; -1: off, 0: a free port
  std::string metrics_address = "127.0.0.1";
  // CURVE (comm/security.h); override the config's security { } fields.
  std::string secret_key;    // this coordinator's NAME.key
  std::string allowed_keys;  // the workers' public keys: a file, or a folder of NAME.pub
  bool insecure = false;     // allow plain TCP on an address other hosts can reach
};

// Registers every flag, bound to `options`, with its default shown by --help.
void add_coordinator_options(CLI::App& app, CoordinatorOptions& options);

}  // namespace dctrain
