// One process standing in for a coordinator's peers: a recording outbox and
// workers that run the real worker session and trainer (worker/session.h,
// worker/trainer.h) on real replicas of a SoftmaxModel, so the coordinator's
// logic is tested with a fake clock. The pieces (manual clock, recording
// link, job recorder) serve the session's own tests too.
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/validation.h"
#include "runtime/replica.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "tests/testing/softmax_model.h"
#include "worker/in_process.h"
#include "worker/session.h"
#include "worker/trainer.h"
#include "worker/worker_clock.h"

namespace dctrain::testing {

class RecordingOutbox : public Outbox {
 public:
  void send(const std::string& peer, Message message) override {
    inbox[peer].push_back(std::move(message));
  }
  // Messages for `peer` not yet taken, oldest first.
  std::map<std::string, std::deque<Message>> inbox;
};

inline Received as_received(const std::string& peer, Message message) {
  return Received{peer, encode(std::move(message))};
}

// A logger writing into a string, so tests can assert on what was logged.
struct CapturedLog {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> logger;
  CapturedLog() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
    logger = std::make_shared<spdlog::logger>("test", sink);
    logger->set_level(spdlog::level::debug);
  }
  bool contains(const std::string& part) const {
    return text.str().find(part) != std::string::npos;
  }
};

inline std::unique_ptr<Model> softmax_for(const v1::RunConfig& config) {
  const v1::ModelConfig& m = config.model();
  return std::make_unique<SoftmaxModel>(m.image_channels() * m.image_height() * m.image_width(),
                                        m.num_classes(), config.seed());
}

// Deep copy of a message (frames included), so a test can deliver one
// message to several workers, or twice.
inline Message copy_of(const Message& message) {
  Message out;
  out.envelope = message.envelope;
  for (const zmq::message_t& frame : message.frames) {
    out.frames.emplace_back(frame.data(), frame.size());
  }
  return out;
}

// A manual worker clock (worker/worker_clock.h): time moves only when the
// test sets it or the compute loop sleeps an injected delay on it.
using dctrain::ManualClock;

// The coordinator's end of a worker's link, for a test that calls the
// session itself: it records what the worker sends (take()) and has nothing
// to poll; and the compute side's queue as the session fills it, the test
// running the jobs (worker/in_process.h).
using RecordingLink = SentMessages;
using JobRecorder = QueuedJobs;

// A dataset shared by several workers of one test (each trainer owns its
// training set, as each process does).
class SharedDataset : public Dataset {
 public:
  explicit SharedDataset(const Dataset& data) : data_(data) {}
  std::string describe() const override { return data_.describe(); }
  uint64_t size() const override { return data_.size(); }
  SampleShape shape() const override { return data_.shape(); }
  void fill(std::span<const uint64_t> ids, const SampleContext& context,
            Batch& out) const override {
    data_.fill(ids, context, out);
  }

 private:
  const Dataset& data_;
};

// The parts a trainer of these tests builds from: the test's training set,
// and the SoftmaxModel.
inline TrainerParts softmax_parts(const Dataset& train) {
  TrainerParts parts;
  parts.open_train = [&train](const v1::RunConfig&) -> std::unique_ptr<Dataset> {
    return std::make_unique<SharedDataset>(train);
  };
  parts.make_model = [](const v1::RunConfig& config, const Dataset&) {
    return softmax_for(config);
  };
  return parts;
}

// A worker in the test's process: the real session and the real trainer
// (welcome, plans, updates, bye), with a recording link instead of the
// DEALER and the jobs run at once instead of on a compute thread. Its log
// is its own (log.text).
class FakeWorker {
 public:
  // The session and the compute loop read the steady clock, as in the
  // process: the injected delays are real sleeps.
  FakeWorker(std::string worker_name, const Dataset& train)
      : name(std::move(worker_name)), parts_(std::make_unique<Parts>(name, train)) {}

  // The hello this worker's session says.
  Message hello() const { return parts_->worker.hello(); }

  // Hands a copy of `message` to the session as it arrives from the
  // coordinator, runs the jobs the session hands to the compute side through
  // the trainer, hands their outputs back to the session, and returns what
  // the worker sent meanwhile.
  std::vector<Message> deliver(const Message& message) {
    Parts& p = *parts_;
    p.worker.deliver(copy_of(message), p.clock.now());
    while (p.worker.has_job()) {
      for (ComputeOutput& out : p.worker.run_job())
        p.worker.computed(std::move(out), p.clock.now());
    }
    return p.worker.take_sent();
  }

  // Takes a welcome; returns the Ready the coordinator waits for.
  Message on_welcome(const Message& welcome) {
    return only(deliver(welcome), v1::Envelope::kReady, "one ready");
  }
  // Takes a plan; returns the contribution.
  Message on_plan(const Message& plan) {
    return only(deliver(plan), v1::Envelope::kContribution, "one contribution");
  }
  void on_update(const Message& update) {
    const std::vector<Message> sent = deliver(update);
    if (!sent.empty()) throw std::runtime_error(unexpected(sent, "nothing"));
  }

  // The trainer's replica (null before the first welcome).
  Replica* replica() { return parts_->worker.replica(); }
  std::string log() const { return parts_->log.text.str(); }

  std::string name;

 private:
  // Held by pointer: the worker's session refers to its link and queue, and the
  // tests keep workers in maps.
  struct Parts {
    Parts(const std::string& worker_name, const Dataset& train)
        : worker(options_for(worker_name), softmax_parts(train), clock, log.logger, clock.now()) {}

    CapturedLog log;
    SteadyClock clock;
    InProcessWorker worker;
  };

  static WorkerOptions options_for(const std::string& worker_name) {
    WorkerOptions options;
    options.name = worker_name;
    options.connect = "tcp://127.0.0.1:0";  // never dialled: the link is a recorder
    return options;
  }

  std::string unexpected(const std::vector<Message>& sent, const std::string& wanted) const {
    std::string bodies;
    for (const Message& m : sent) {
      bodies += std::string(bodies.empty() ? "" : ", ") + std::string(body_name(m.envelope));
      if (m.envelope.has_error()) bodies += " (" + m.envelope.error().message() + ")";
    }
    return fmt::format("worker '{}' sent [{}] where {} was expected; its log:\n{}", name, bodies,
                       wanted, log());
  }

  Message only(std::vector<Message> sent, v1::Envelope::BodyCase body,
               const std::string& wanted) const {
    if (sent.size() != 1 || sent.front().envelope.body_case() != body) {
      throw std::runtime_error(unexpected(sent, wanted));
    }
    return std::move(sent.front());
  }

  std::unique_ptr<Parts> parts_;
};

}  // namespace dctrain::testing
