// The worker's side of its conversation with the coordinator, in the
// coordinator's shape: handle() for every message from the coordinator,
// on_event(), on_compute() and on_signal() for what else happens, and tick()
// every few hundred milliseconds (poll_seconds()), each given the time on
// the caller's clock. It owns no socket, thread or clock: it talks through a
// Link and a ComputeQueue, so worker.cc runs it over ZeroMQ with the compute
// thread, and the tests run it with a fake link and a fake clock.
//
// What it does:
// - Until the coordinator first answers it waits: it says hello on every
//   connection ZeroMQ establishes (ZeroMQ retries a refused or unreachable
//   address by itself), sends no heartbeats (they would only pile up in the
//   queue), logs what it waits for every 2 s, and gives up after
//   --connect-timeout (exit kWorkerNoCoordinator).
// - Once answered it heartbeats whenever it has sent nothing for the run's
//   heartbeat_seconds; a coordinator silent for max(30 s, 3 x
//   silence_seconds) may have restarted (resume), so it says hello again and
//   waits as at the start.
// - The coordinator's welcome (also a resync after a checksum mismatch),
//   plans, updates and bye go to the compute side in arrival order; what the
//   compute side hands back goes to the coordinator, and its status ends the
//   session with that exit code.
// - A refusal ends it (kWorkerRefused); a request to rejoin is answered with
//   a hello unless the coordinator already said bye; a signal sends a bye
//   and ends it (kWorkerInterrupted).
// A bad message is logged and dropped; it never throws.
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <optional>
#include <vector>
#include <zmq.hpp>

#include "comm/link.h"
#include "comm/message.h"
#include "exchange/round_cancel.h"
#include "proto/wire.pb.h"
#include "worker/options.h"
#include "worker/trainer.h"

namespace dctrain {

class WorkerSession {
 public:
  // `options.name` is final (not empty). `blas` travels in the hello.
  WorkerSession(WorkerOptions options, v1::BlasInfo blas, Link& coordinator, ComputeQueue& compute,
                std::shared_ptr<spdlog::logger> log, double now);

  // A message from the coordinator, every part as it arrived.
  void handle(std::vector<zmq::message_t> parts, double now);
  void on_event(ConnectionEvent event, double now);
  void on_compute(ComputeOutput output, double now);
  void on_signal(int signal_number, double now);
  void tick(double now);

  bool done() const { return exit_code_.has_value(); }
  // The worker's exit code (worker/exit_codes.h), once done().
  int exit_code() const { return exit_code_.value_or(-1); }
  // Whether the coordinator has answered since the session last (re)started
  // waiting.
  bool answered() const { return answered_; }
  // How long the caller may wait for input before the next tick().
  double poll_seconds() const { return answered_ ? heartbeat_seconds_ * 0.5 : 0.25; }

  // The hello this worker says: its name, version, threads, data and BLAS.
  Message hello() const;

  // Data plane "exchange": where the session ends the round the compute
  // thread waits in, when the coordinator's word says it is over (a later
  // attempt's plan or step, an ExchangeCancel, an update of its step, a
  // welcome, a bye). Null: no exchange.
  void set_round_cancel(RoundCancel* rounds) { rounds_ = rounds; }

 private:
  void say_hello();
  void start_waiting(double now);
  void wait(double now);
  // Ends the session; a round the compute thread waits in ends too, so the
  // thread can be joined at once.
  void finish(int exit_code);
  // Ends the rounds that `message` from the coordinator says are over.
  void end_rounds(const v1::Envelope& envelope);

  WorkerOptions options_;
  v1::BlasInfo blas_;
  Link& coordinator_;
  ComputeQueue& compute_;
  std::shared_ptr<spdlog::logger> log_;
  RoundCancel* rounds_ = nullptr;
  uint64_t run_ = 0;  // the coordinator process of the last exchange plan (ExchangePlan.run)
  std::optional<ExchangeRound> last_planned_;  // the round of the last exchange plan

  std::optional<int> exit_code_;
  double heartbeat_seconds_ = 0.5;  // the run's, from the welcome
  double silence_seconds_ = 10.0;
  double last_sent_ = 0.0;
  double last_heard_ = 0.0;
  bool answered_ = false;   // the coordinator answered since the session (re)started waiting
  bool connected_ = false;  // ZeroMQ holds a connection now
  bool leaving_ = false;    // the coordinator said bye: never say hello again
  int attempts_ = 1;        // connection attempts while waiting
  double waiting_since_ = 0.0;
  double last_wait_log_ = 0.0;
};

}  // namespace dctrain
