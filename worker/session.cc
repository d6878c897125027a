#include "worker/session.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "common/cli.h"
#include "common/source_version.h"
#include "common/version.h"
#include "common/wall_clock.h"
#include "exchange/sum_digest.h"
#include "trace/recorder.h"
#include "worker/exit_codes.h"

namespace dctrain {

namespace {
// How often the session says what it is waiting for.
constexpr double kWaitLogSeconds = 2.0;
// Every round there is or will be: what a bye or the session's end ends.
constexpr ExchangeRound kEveryRound{std::numeric_limits<uint64_t>::max(),
                                    std::numeric_limits<uint32_t>::max(),
                                    std::numeric_limits<uint64_t>::max()};
}  // namespace

WorkerSession::WorkerSession(WorkerOptions options, v1::BlasInfo blas, Link& coordinator,
                             ComputeQueue& compute, std::shared_ptr<spdlog::logger> log, double now)
    : options_(std::move(options)),
      blas_(std::move(blas)),
      coordinator_(coordinator),
      compute_(compute),
      log_(std::move(log)),
      last_sent_(now),
      last_heard_(now) {
  log_->info("{} connecting to {} as '{}' ({} threads, data {})", version_line("dctrain-worker"),
             options_.connect, options_.name, options_.threads,
             options_.data_dir.empty() ? std::string("synthetic only") : options_.data_dir);
  start_waiting(now);
}

Message WorkerSession::hello() const {
  Message m;
  m.envelope = make_envelope(0, options_.name);
  v1::Hello& h = *m.envelope.mutable_hello();
  h.set_worker_name(options_.name);
  h.set_software_version(source_version());
  h.set_threads(static_cast<uint32_t>(options_.threads));
  h.set_has_data_dir(!options_.data_dir.empty());
  *h.mutable_blas() = blas_;
  h.set_exchange_endpoint(options_.exchange_endpoint);
  h.set_exchange_token(options_.exchange_token);
  if (!options_.exchange_endpoint.empty()) {
    for (SumDigestKind k : sum_digests_offered()) h.add_sum_digests(to_wire(k));
  }
  return m;
}

void WorkerSession::say_hello() {
  coordinator_.send(hello());
}

void WorkerSession::start_waiting(double now) {
  answered_ = false;
  attempts_ = 1;
  waiting_since_ = last_wait_log_ = now;
}

void WorkerSession::on_signal(int signal_number, double /*now*/) {
  if (done()) return;
  log_->warn("signal {} received: leaving the run", signal_number);
  Message m;
  m.envelope = make_envelope(0, options_.name);
  m.envelope.mutable_bye()->set_reason("worker interrupted by a signal");
  coordinator_.send(std::move(m));
  finish(kWorkerInterrupted);
}

void WorkerSession::on_event(ConnectionEvent event, double /*now*/) {
  if (done()) return;
  switch (event) {
    case ConnectionEvent::kConnected:
      connected_ = true;
      if (!answered_) {
        log_->debug("connected to {} (attempt {}); saying hello", options_.connect, attempts_);
        say_hello();
      }
      break;
    case ConnectionEvent::kRetried:
      ++attempts_;
      break;
    case ConnectionEvent::kDisconnected:
      connected_ = false;
      if (answered_) {
        log_->warn("lost the connection to the coordinator at {}; reconnecting", options_.connect);
      }
      break;
    case ConnectionEvent::kHandshakeFailed:
      log_->warn(
          "something answers at {} but does not speak dctrain's protocol (the ZeroMQ "
          "handshake failed): is that the coordinator's address and port, and do both sides use "
          "CURVE (--secret-key) or neither?",
          options_.connect);
      break;
    case ConnectionEvent::kAuthRefused:
      // Retrying cannot help: the key is not in the coordinator's allow-list.
      log_->error(
          "the coordinator at {} refused this worker's CURVE key: add this worker's NAME.pub to "
          "the coordinator's allow-list (--allowed-keys), or start it with the key that is there",
          options_.connect);
      finish(kWorkerRefused);
      break;
  }
}

void WorkerSession::on_compute(ComputeOutput output, double now) {
  if (done()) return;
  if (const ComputeStatus* status = std::get_if<ComputeStatus>(&output)) {
    finish(status->exit_code);
    return;
  }
  Message& message = std::get<Message>(output);
  stamp_trace_sent(message.envelope, now);  // the timeline's round trip (trace/recorder.h)
  coordinator_.send(std::move(message));
  last_sent_ = now;
}

void WorkerSession::handle(std::vector<zmq::message_t> parts, double now) {
  if (done()) return;
  Message message;
  if (const auto problem = decode(std::move(parts), message)) {
    log_->warn("dropped a message from the coordinator: {}", *problem);
    return;
  }
  const v1::Envelope& envelope = message.envelope;
  if (envelope.body_case() != v1::Envelope::kRefusal) {
    if (const auto problem = version_problem(envelope)) {
      log_->warn("dropped a message: {}", *problem);
      return;
    }
  }
  last_heard_ = now;
  end_rounds(envelope);
  if (!answered_) {
    answered_ = true;
    const double waited = now - waiting_since_;
    if (waited >= kWaitLogSeconds) {
      log_->info("the coordinator at {} answered after {:.1f} s", options_.connect, waited);
    }
  }
  switch (envelope.body_case()) {
    case v1::Envelope::kWelcome:
      heartbeat_seconds_ = envelope.welcome().config().liveness().heartbeat_seconds();
      silence_seconds_ = envelope.welcome().config().liveness().silence_seconds();
      compute_.push(ComputeJob{std::move(message), now});
      break;
    case v1::Envelope::kBye:
      if (!envelope.bye().released()) {
        log_->info("the coordinator ends the run: {}", envelope.bye().reason());
      }
      leaving_ = true;
      compute_.push(ComputeJob{std::move(message), now});
      break;
    case v1::Envelope::kPlan:
    case v1::Envelope::kUpdate:
    case v1::Envelope::kSumRequest:
    case v1::Envelope::kRoundCheckRequest:
      compute_.push(ComputeJob{std::move(message), now});
      break;
    case v1::Envelope::kRefusal:
      log_->error("the coordinator refused this worker: {}", envelope.refusal().reason());
      finish(kWorkerRefused);
      break;
    case v1::Envelope::kError:
      if (envelope.error().rejoin()) {
        if (leaving_) break;
        log_->warn("{}; saying hello again", envelope.error().message());
        say_hello();
      } else {
        log_->warn("the coordinator reports: {}", envelope.error().message());
      }
      break;
    case v1::Envelope::kHeartbeat:
    case v1::Envelope::kExchangeCancel:  // end_rounds() did what it asks
      break;
    default:
      log_->warn("dropped a {} from the coordinator", body_name(envelope));
  }
}

void WorkerSession::finish(int exit_code) {
  exit_code_ = exit_code;
  if (rounds_ != nullptr) rounds_->end_through(kEveryRound);
}

void WorkerSession::end_rounds(const v1::Envelope& envelope) {
  if (rounds_ == nullptr) return;
  constexpr uint32_t kEveryAttempt = std::numeric_limits<uint32_t>::max();
  const uint64_t step = envelope.step();
  switch (envelope.body_case()) {
    case v1::Envelope::kPlan: {
      if (!envelope.plan().has_exchange()) return;
      const v1::ExchangePlan& x = envelope.plan().exchange();
      run_ = x.run();
      last_planned_ = ExchangeRound{step, x.attempt(), run_};
      // Every round before this one is over: a redo's plan supersedes the
      // attempt the members may still wait in (a member died).
      if (x.attempt() > 0) {
        rounds_->end_through({step, x.attempt() - 1, run_});
      } else if (step > 0) {
        rounds_->end_through({step - 1, kEveryAttempt, run_});
      }
      return;
    }
    case v1::Envelope::kExchangeCancel:
      rounds_->end_through({step, envelope.exchange_cancel().attempt(), run_});
      return;
    case v1::Envelope::kUpdate:  // the step is settled (committed or dropped)
      rounds_->end_through({step, kEveryAttempt, run_});
      return;
    case v1::Envelope::kWelcome:
      // Resynced: no round planned to this worker before it is its own any
      // more. (Not "every round of the welcome's step": a coordinator that
      // waits for workers welcomes with the step it will plan next.)
      if (last_planned_) rounds_->end_through(*last_planned_);
      return;
    case v1::Envelope::kBye:
      rounds_->end_through(kEveryRound);
      return;
    default:
      return;
  }
}

void WorkerSession::tick(double now) {
  if (done()) return;
  if (!answered_) {
    wait(now);
    return;
  }
  if (now - last_sent_ >= heartbeat_seconds_) {
    Message m;
    m.envelope = make_envelope(0, options_.name);
    // Wall time, for a reader of the coordinator's log; nothing depends on it.
    m.envelope.mutable_heartbeat()->set_sent_unix_micros(system_unix_micros());
    coordinator_.send(std::move(m));
    last_sent_ = now;
  }
  // A coordinator silent for long may have restarted (resume): say hello
  // again, and wait for an answer as at the start.
  const double patience = std::max(30.0, 3.0 * silence_seconds_);
  if (now - last_heard_ > patience) {
    log_->warn("no word from the coordinator for {:.0f} s; saying hello again", patience);
    start_waiting(now);
    say_hello();
  }
}

void WorkerSession::wait(double now) {
  const double timeout = options_.connect_timeout;
  const double waited = now - waiting_since_;
  if (timeout > 0 && waited >= timeout) {
    log_->error(
        "no answer from the coordinator at {} within {:.0f} s ({} connection attempts{}): "
        "is dctrain-coordinator running there, and can this host reach that address and "
        "port? (--connect-timeout sets how long to wait)",
        options_.connect, timeout, attempts_,
        connected_ ? "; connected, but the hello got no answer" : "");
    finish(kWorkerNoCoordinator);
    return;
  }
  if (now - last_wait_log_ >= kWaitLogSeconds) {
    const std::string limit =
        timeout > 0 ? fmt::format("{:.0f} s", timeout) : std::string("no limit");
    log_->info("waiting for the coordinator at {}: {} (attempt {}, {:.0f} s of {})",
               options_.connect,
               connected_ ? "connected, no answer to the hello yet" : "no answer yet", attempts_,
               waited, limit);
    last_wait_log_ = now;
  }
}

}  // namespace dctrain
