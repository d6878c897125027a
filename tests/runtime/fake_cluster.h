// One process standing in for a coordinator's peers: a recording outbox and
// fake workers that hold real replicas (SoftmaxModel) and run the real
// compute loop, so the coordinator's logic is tested with a fake clock.
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "runtime/replica.h"
#include "runtime/run_config.h"
#include "runtime/setup.h"
#include "tests/runtime/softmax_model.h"
#include "worker/compute_loop.h"

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
  bool contains(const std::string& part) const { return text.str().find(part) != std::string::npos; }
};

inline std::unique_ptr<Model> softmax_for(const v1::RunConfig& config) {
  const v1::ModelConfig& m = config.model();
  return std::make_unique<SoftmaxModel>(m.image_channels() * m.image_height() * m.image_width(),
                                        m.num_classes(), config.seed());
}

class FakeWorker {
 public:
  FakeWorker(std::string worker_name, const Dataset& train)
      : name(std::move(worker_name)), train_(train) {}

  Message hello() const {
    Message m;
    m.envelope = make_envelope(0, name);
    m.envelope.mutable_hello()->set_worker_name(name);
    m.envelope.mutable_hello()->set_threads(1);
    return m;
  }

  // Takes a welcome; returns the Ready the coordinator waits for.
  Message on_welcome(const Message& welcome) {
    const v1::Welcome& w = welcome.envelope.welcome();
    rank = w.rank();
    config = w.config();
    replica = std::make_unique<Replica>(softmax_for(config), config.optimizer());
    replica->load_state(welcome, 0, static_cast<int64_t>(w.optimizer_steps()));
    delays = std::make_unique<DelayModel>(config.delay(), rank);
    loop = std::make_unique<ComputeLoop>(*replica, train_, config.seed(), *delays);
    Message ready;
    ready.envelope = make_envelope(welcome.envelope.step(), name);
    ready.envelope.mutable_ready()->set_parameter_checksum(replica->parameter_checksum());
    return ready;
  }

  Message on_plan(const Message& plan) {
    return loop->run(plan.envelope.plan(), plan.envelope.step(), name,
                     std::chrono::steady_clock::now());
  }

  void on_update(const Message& update) { loop->apply(update); }

  std::string name;
  uint32_t rank = 0;
  v1::RunConfig config;
  std::unique_ptr<Replica> replica;
  std::unique_ptr<DelayModel> delays;
  std::unique_ptr<ComputeLoop> loop;

 private:
  const Dataset& train_;
};

}  // namespace dctrain::testing
