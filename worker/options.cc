#include "worker/options.h"

#include "common/cli.h"

namespace dctrain {

void add_worker_options(CLI::App& app, WorkerOptions& options) {
  add_common_options(app, "dctrain-worker", options.log_level);
  app.add_option("--connect", options.connect, "Coordinator address, tcp://HOST:PORT")
      ->capture_default_str();
  app.add_option("--data-dir", options.data_dir,
                 "Data root (mnist/, cifar-10-batches-bin/, text/, ...); empty: synthetic data")
      ->check(CLI::ExistingDirectory);
  app.add_option("--threads", options.threads, "Compute threads for this worker")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--name", options.name, "Worker name in logs and metrics (empty: host:pid)");
  app.add_option("--connect-timeout", options.connect_timeout,
                 "Seconds to wait for an answer from the coordinator (at start, or after it fell "
                 "silent) before giving up with exit status 4; the connection is retried "
                 "meanwhile; 0: wait forever")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--secret-key", options.secret_key,
                 "CURVE: this worker's secret key file NAME.key (mode 0600; dctrain-keygen makes "
                 "it; its NAME.pub must be in the coordinator's allow-list); needs "
                 "--coordinator-key")
      ->check(CLI::ExistingFile);
  app.add_option("--coordinator-key", options.coordinator_key,
                 "CURVE: the coordinator's public key file NAME.pub; needs --secret-key")
      ->check(CLI::ExistingFile);
  app.add_option("--exchange-bind", options.exchange_bind,
                 "Address the worker's data plane peer binds, tcp://IP:PORT (port * for any; "
                 "other workers must reach it; tcp://*:PORT advertises the interface that "
                 "reaches the coordinator); empty: tcp://IP:* on that interface");
  app.add_option("--exchange-advertise", options.exchange_advertise,
                 "Endpoint the other workers connect to, tcp://HOST:PORT, when it is not the "
                 "bound one (a container's published port, a NAT forwarding to --exchange-bind); "
                 "empty: the bound endpoint");
  add_blas_options(app, options.blas_info);
}

}  // namespace dctrain
