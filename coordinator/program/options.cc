#include "coordinator/program/options.h"

#include "common/cli.h"

namespace dctrain {

void add_coordinator_options(CLI::App& app, CoordinatorOptions& options) {
  add_common_options(app, "dctrain-coordinator", options.log_level);
  add_run_flags(app, options.run);
  app.add_option("--bind", options.bind, "Address to bind for workers, tcp://HOST:PORT")
      ->capture_default_str();
  app.add_option("--workers", options.workers, "Workers to wait for (0: the config's value)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--threads", options.threads, "Compute threads for evaluation")
      ->check(CLI::Range(1, 256))
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
