#include "coordinator/options.h"

#include "common/cli.h"

namespace dctrain {

void add_coordinator_options(CLI::App& app, CoordinatorOptions& options) {
  add_common_options(app, "dctrain-coordinator", options.log_level);
  app.add_option("--config", options.config_path, "Run config file (Protobuf text format)")
      ->check(CLI::ExistingFile);
  app.add_option("--bind", options.bind, "Address to bind for workers, tcp://HOST:PORT")
      ->capture_default_str();
  app.add_option("--out", options.out_dir, "Run folder for config, metrics, summary and logs")
      ->capture_default_str();
  app.add_option("--resume", options.resume_dir,
                 "Continue from the last checkpoint in this run folder")
      ->check(CLI::ExistingDirectory);
  app.add_option("--workers", options.workers, "Workers to wait for (0: the config's value)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--tau", options.tau,
                 "Step compute threshold: seconds, 'inf', or 'auto' (chosen from measured "
                 "micro-batch times after a warm-up at inf); empty: the config's value");
  app.add_option("--steps", options.steps, "Stop after this many steps (0: the config's limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--data-dir", options.data_dir,
                 "Data root for the held-out split (mnist/, cifar-10-*/, text/, ...); empty: "
                 "synthetic only")
      ->check(CLI::ExistingDirectory);
  app.add_option("--threads", options.threads, "Compute threads for evaluation")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--metrics-port", options.metrics_port,
                 "Serve live metrics (Prometheus text) at http://ADDRESS:PORT/metrics; 0: a free "
                 "port, written to RUN_DIR/metrics_endpoint; absent: no server")
      ->check(CLI::Range(0, 65535));
  app.add_option("--metrics-address", options.metrics_address,
                 "Numeric address the metrics server listens on (0.0.0.0 or :: for every "
                 "interface)")
      ->capture_default_str();
  add_blas_options(app, options.blas_info);
}

}  // namespace dctrain
