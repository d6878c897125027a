#include "coordinator/options.h"

#include "common/cli.h"

namespace dctrain {

void add_coordinator_options(CLI::App& app, CoordinatorOptions& options) {
  add_common_options(app, "dctrain-coordinator", options.log_level);
  app.add_option("--config", options.config_path, "Run config file (Protobuf text format)")
      ->check(CLI::ExistingFile);
  app.add_option("--bind", options.bind, "Address to bind for workers, tcp://HOST:PORT")
      ->capture_default_str();
  app.add_option("--out", options.out_dir,
                 "Run folder for config, metrics, summary and logs (default: a new folder "
                 "runs/NAME-YYYYMMDD-HHMMSS, NAME the config's name); one that holds another "
                 "run is refused unless --overwrite");
  app.add_flag("--overwrite", options.overwrite,
               "Start the run in --out even if that folder holds another run, whose files "
               "(config, metrics, checkpoint, summary, trace, log) are removed first");
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
  app.add_option("--secret-key", options.secret_key,
                 "CURVE: this coordinator's secret key file NAME.key (mode 0600; dctrain-keygen "
                 "makes it); with it every connection is encrypted and only --allowed-keys join")
      ->check(CLI::ExistingFile);
  app.add_option("--allowed-keys", options.allowed_keys,
                 "CURVE: the workers' public keys, a file (one key per line, then an optional "
                 "comment) or a folder of NAME.pub files")
      ->check(CLI::ExistingPath);
  app.add_flag("--insecure", options.insecure,
               "Allow plain TCP (no CURVE) on an address other hosts can reach: anyone who "
               "reaches the port can join the run and read its traffic; for trusted networks");
  add_blas_options(app, options.blas_info);
}

}  // namespace dctrain
