// The flags of a run that dctrain-coordinator takes and dctrain-launch
// passes on to it: declared once, here, so that the two command lines say
// the same and cannot drift. The flags that mean something else to each
// (--workers, --threads, --bind, --insecure) are each program's own.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace dctrain {

struct RunFlags {
  std::string config_path;  // run config, Protobuf text format
  // Run folder: config, metrics, summary, logs; empty: a new one under runs/.
  std::string out_dir;
  bool overwrite = false;  // --out may hold another run, whose files are replaced
  std::string resume_dir;  // continue from this run folder's checkpoint
  std::string data_dir;    // data root; empty: synthetic data only
  std::string tau;         // "": the config's; seconds, "inf" or "auto"
  int64_t steps = 0;       // 0: the config's max steps
  int metrics_port = -1;   // Prometheus metrics over HTTP; -1: off, 0: a free port
  std::string metrics_address = "127.0.0.1";
};

// Registers the run's flags, bound to `flags`.
void add_run_flags(CLI::App& app, RunFlags& flags);

// The flags that differ from their defaults, as a command line of
// dctrain-coordinator takes them (--config FILE, --overwrite, ...).
std::vector<std::string> run_flag_arguments(const RunFlags& flags);

}  // namespace dctrain
