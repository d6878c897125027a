// A worker inside another program's process: the real session
// (worker/session.h) and trainer (worker/trainer.h), its link to the
// coordinator a list of what it sent, and the compute jobs the session
// queues run when the owner asks, on the clock the trainer was given. The
// simulator runs its workers so (sim/simulation.cc), the coordinator's
// tests theirs (tests/testing/fake_cluster.h).
#pragma once

#include <spdlog/logger.h>

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "comm/framing.h"
#include "comm/link.h"
#include "comm/message.h"
#include "worker/options.h"
#include "worker/session.h"
#include "worker/trainer.h"
#include "worker/worker_clock.h"

namespace dctrain {

// A link that keeps what the worker sends; it has nothing to poll.
class SentMessages final : public Link {
 public:
  void send(Message message) override { sent.push_back(std::move(message)); }
  bool try_receive(std::vector<zmq::message_t>&) override { return false; }
  std::optional<ConnectionEvent> try_event() override { return std::nullopt; }
  void add_poll_items(std::vector<zmq::pollitem_t>&) override {}
  // Everything sent and not yet taken, oldest first.
  std::vector<Message> take();
  std::deque<Message> sent;
};

// The compute side's queue, as the session fills it.
class QueuedJobs final : public ComputeQueue {
 public:
  void push(ComputeJob job) override { jobs.push_back(std::move(job)); }
  std::deque<ComputeJob> jobs;
};

class InProcessWorker {
 public:
  // `compute_clock`: the trainer's (the compute loop reads it and sleeps
  // its injected delays on it); `now`: the session's clock at the start.
  InProcessWorker(const WorkerOptions& options, TrainerParts parts, WorkerClock& compute_clock,
                  std::shared_ptr<spdlog::logger> log, double now)
      : trainer_(options, std::move(parts), compute_clock, log),
        session_(options, v1::BlasInfo(), link_, jobs_, std::move(log), now) {}
  InProcessWorker(const InProcessWorker&) = delete;
  InProcessWorker& operator=(const InProcessWorker&) = delete;

  Message hello() const { return session_.hello(); }
  // A message from the coordinator reaches the session at `now`.
  void deliver(Message message, double now) { session_.handle(encode(std::move(message)), now); }
  // A compute result reaches the session.
  void computed(ComputeOutput output, double now) { session_.on_compute(std::move(output), now); }
  // The session's clock work (heartbeats).
  void tick(double now) { session_.tick(now); }
  bool done() const { return session_.done(); }

  // Whether the session queued a job for the compute side.
  bool has_job() const { return !jobs_.jobs.empty(); }
  // The oldest queued job, run on the trainer: what it hands back.
  std::vector<ComputeOutput> run_job();
  // What the worker sent since the last call, oldest first.
  std::vector<Message> take_sent() { return link_.take(); }
  // The trainer's replica (null before the first welcome).
  Replica* replica() { return trainer_.replica(); }

 private:
  SentMessages link_;
  QueuedJobs jobs_;
  Trainer trainer_;
  WorkerSession session_;
};

}  // namespace dctrain
