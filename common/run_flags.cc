#include "common/run_flags.h"

namespace dctrain {

void add_run_flags(CLI::App& app, RunFlags& flags) {
  app.add_option("--config", flags.config_path, "Run config file (Protobuf text format)")
      ->check(CLI::ExistingFile);
  app.add_option("--out", flags.out_dir,
                 "Run folder for config, metrics, summary and logs (default: a new folder "
                 "runs/NAME-YYYYMMDD-HHMMSS, NAME the config's name); one that holds another "
                 "run is refused unless --overwrite");
  app.add_flag("--overwrite", flags.overwrite,
               "Start the run in --out even if that folder holds another run, whose files "
               "(config, metrics, checkpoint, summary, trace, log) are removed first");
  app.add_option("--resume", flags.resume_dir,
                 "Continue from the last checkpoint in this run folder")
      ->check(CLI::ExistingDirectory);
  app.add_option("--data-dir", flags.data_dir,
                 "Data root (mnist/, cifar-10-*/, text/, ...): the training split for the "
                 "workers, the held-out split for the coordinator; empty: synthetic data only")
      ->check(CLI::ExistingDirectory);
  app.add_option("--tau", flags.tau,
                 "Step compute threshold: seconds, 'inf', or 'auto' (chosen from measured "
                 "micro-batch times after a warm-up at inf); empty: the config's value");
  app.add_option("--steps", flags.steps, "Stop after this many steps (0: the config's limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--metrics-port", flags.metrics_port,
                 "Serve live metrics (Prometheus text) at http://ADDRESS:PORT/metrics; 0: a free "
                 "port, written to RUN_DIR/metrics_endpoint; absent: no server")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-address", flags.metrics_address,
                 "Numeric address the metrics server listens on (0.0.0.0 or :: for every "
                 "interface)")
      ->capture_default_str();
}

std::vector<std::string> run_flag_arguments(const RunFlags& flags) {
  const RunFlags defaults;
  std::vector<std::string> out;
  const auto text = [&out](const char* flag, const std::string& value, const std::string& unset) {
    if (value != unset) out.insert(out.end(), {flag, value});
  };
  text("--config", flags.config_path, defaults.config_path);
  text("--out", flags.out_dir, defaults.out_dir);
  if (flags.overwrite) out.push_back("--overwrite");
  text("--resume", flags.resume_dir, defaults.resume_dir);
  text("--data-dir", flags.data_dir, defaults.data_dir);
  text("--tau", flags.tau, defaults.tau);
  if (flags.steps != defaults.steps)
    out.insert(out.end(), {"--steps", std::to_string(flags.steps)});
  if (flags.metrics_port != defaults.metrics_port) {
    out.insert(out.end(), {"--metrics-port", std::to_string(flags.metrics_port)});
  }
  text("--metrics-address", flags.metrics_address, defaults.metrics_address);
  return out;
}

}  // namespace dctrain
