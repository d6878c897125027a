#include "worker/worker.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <vector>

#include "comm/security.h"
#include "comm/transport.h"
#include "common/stop_signals.h"
#include "worker/compute_thread.h"
#include "worker/data_plane.h"
#include "worker/session.h"
#include "worker/trainer.h"
#include "worker/worker_clock.h"

namespace dctrain {

namespace {

// The DEALER's security from the key flags; throws, saying how to fix it,
// on half a pair of flags or a key file that is missing, unreadable or
// readable by others.
SocketSecurity worker_security(const WorkerOptions& options, spdlog::logger& log) {
  SocketSecurity security;
  if (options.secret_key.empty() != options.coordinator_key.empty()) {
    throw std::runtime_error(
        "CURVE needs both --secret-key (this worker's NAME.key) and --coordinator-key (the "
        "coordinator's NAME.pub); pass both, or neither for plain TCP");
  }
  if (options.secret_key.empty()) {
    if (!is_local_only_endpoint(options.connect)) {
      log.warn(
          "security: plain TCP to {}: the link is not encrypted and the coordinator is not "
          "authenticated (pass --secret-key and --coordinator-key to use CURVE)",
          options.connect);
    }
    return security;
  }
  security.curve = true;
  security.own = load_secret_key(options.secret_key);
  security.server_public_key = load_public_key(options.coordinator_key);
  log.info("security: CURVE; this worker's public key {}, the coordinator's {}",
           security.own.public_key, security.server_public_key);
  return security;
}

}  // namespace

std::string default_worker_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{}:{}", host, ::getpid());
}

int run_worker(const WorkerOptions& options_in, const v1::BlasInfo& blas,
               std::shared_ptr<spdlog::logger> log) {
  WorkerOptions options = options_in;
  if (options.name.empty()) options.name = default_worker_name();
  if (!options.data_dir.empty()) {
    options.data_dir = std::filesystem::absolute(options.data_dir).string();
  }

  StopSignals signals;
  SteadyClock clock;
  zmq::context_t context(1);
  const SocketSecurity security = worker_security(options, *log);
  DealerTransport coordinator(context, options.connect, options.name, log, security);
  // The data plane's peer is bound before the hello, which advertises it;
  // CURVE with this worker's key pair when the control plane is CURVE.
  WorkerDataPlane data_plane(options.exchange_bind, options.connect, security, log);
  const std::string& advertise = options.exchange_advertise;
  if (!advertise.empty() && !advertise.starts_with("tcp://") && !advertise.starts_with("ipc://")) {
    throw std::runtime_error(fmt::format(
        "--exchange-advertise '{}' is no endpoint: expected tcp://HOST:PORT (or ipc://PATH)",
        advertise));
  }
  options.exchange_endpoint = advertise.empty() ? data_plane.endpoint() : advertise;
  options.exchange_token = data_plane.token();
  log->debug("exchange endpoint {}", options.exchange_endpoint);
  Trainer trainer(options, process_parts(options), clock, log);
  trainer.set_data_plane(&data_plane);
  ComputeThread compute(context, trainer);  // joined before the trainer goes
  WorkerSession session(options, blas, coordinator, compute, log, clock.now());
  session.set_round_cancel(&data_plane.cancel());

  std::vector<zmq::pollitem_t> items;
  coordinator.add_poll_items(items);
  compute.add_poll_item(items);
  const size_t signal_item = items.size();
  items.push_back({nullptr, signals.fd(), ZMQ_POLLIN, 0});

  std::vector<zmq::message_t> parts;
  while (!session.done()) {
    zmq::poll(items, std::chrono::milliseconds(static_cast<int>(session.poll_seconds() * 1000)));
    // A wake-up with nothing to take is a signal on its way to this thread
    // (see StopSignals::take): the next poll sees it.
    if (items[signal_item].revents & ZMQ_POLLIN) {
      if (const int signal_number = signals.take()) session.on_signal(signal_number, clock.now());
    }
    while (!session.done()) {
      const std::optional<ConnectionEvent> event = coordinator.try_event();
      if (!event) break;
      session.on_event(*event, clock.now());
    }
    while (!session.done()) {
      std::optional<ComputeOutput> output = compute.try_take();
      if (!output) break;
      session.on_compute(std::move(*output), clock.now());
    }
    while (!session.done() && coordinator.try_receive(parts)) {
      session.handle(std::move(parts), clock.now());
    }
    session.tick(clock.now());
  }
  return session.exit_code();
}

}  // namespace dctrain
