// A coordinator on a fake clock with three in-process workers ("a", "b",
// "c") answering through FakeWorker, and a run folder of its own: the
// fixture the coordinator's tests share. A test edits `config` and the hooks,
// then calls start() and pump(); every message crosses encode and decode on
// its way, as on the wire.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/coordinator.h"
#include "metrics/metrics_json.h"
#include "tests/testing/fake_cluster.h"
#include "tests/testing/paths.h"

namespace dctrain::testing {

class CoordinatorFixture : public ::testing::Test {
 public:
  // `config_text`: the run config every test starts from; `label`: the run
  // folder's prefix.
  CoordinatorFixture(const char* config_text, std::string label)
      : config_text_(config_text), label_(std::move(label)) {}

  void SetUp() override {
    run_dir = scratch_.emplace(label_ + "-test").path();
    config = parse_run_config(config_text_, label_);
  }
  void TearDown() override { scratch_.reset(); }  // kept if the test failed

  // The coordinator and the workers, from `config` as the program finishes
  // it; with `hello_on_start` every worker says hello at once.
  void start() {
    // FakeWorker sends its gradient to the coordinator and has no data
    // plane: the coordinator's logic is tested here on the star; the
    // exchange is tested over real processes (exchange_process_test).
    if (config.data_plane().kind() == v1::DATA_PLANE_UNSET) {
      config.mutable_data_plane()->set_kind(v1::DATA_PLANE_STAR);
    }
    finalize_run_config(config);
    train = open_dataset(config, Split::kTrain, "");
    resolve_step_budget(config, train_samples(config, *train));  // as the program does
    replica = std::make_unique<Replica>(softmax_for(config), replicated_optimizer(config));
    CoordinatorSetup setup{config, train_samples(config, *train), run_dir, std::nullopt,
                           std::nullopt};
    setup.evaluation_thread = evaluation_thread;
    setup.publish_metrics = publish_metrics;
    setup.wall_clock = wall_clock;
    coordinator = std::make_unique<Coordinator>(setup, *replica, evaluator, outbox, log.logger,
                                                [this] { return now; });
    for (const std::string& name : order) workers.emplace(name, FakeWorker(name, *train));
    if (hello_on_start) {
      for (const std::string& name : order) hello(name);
    }
  }

  void hello(const std::string& name) {
    coordinator->handle(as_received(name, workers.at(name).hello()), now);
  }

  // A message as the wire would deliver it.
  static Message roundtrip(Message m) {
    Message out;
    const auto problem = decode(encode(std::move(m)), out);
    EXPECT_FALSE(problem.has_value()) << *problem;
    return out;
  }

  // Delivers queued messages to the workers (those in `order` first, in
  // that order, then any other in name order; a worker's whole queue at a
  // time; not to the `silent` ones) and their answers back, until nothing
  // moves.
  void pump(const std::set<std::string>& silent = {}) {
    bool moved = true;
    while (moved) {
      moved = false;
      for (const std::string& name : delivery_order()) {
        if (silent.contains(name)) continue;
        FakeWorker& worker = workers.at(name);
        auto& queue = outbox.inbox[name];
        while (!queue.empty()) {
          Message m = roundtrip(std::move(queue.front()));
          queue.pop_front();
          moved = true;
          deliver(name, worker, std::move(m));
        }
      }
    }
  }

  std::vector<std::string> delivery_order() const {
    std::vector<std::string> out;
    for (const std::string& name : order) {
      if (workers.contains(name)) out.push_back(name);
    }
    for (const auto& [name, worker] : workers) {
      if (std::find(order.begin(), order.end(), name) == order.end()) out.push_back(name);
    }
    return out;
  }

  // One message to one worker, and its answer to the coordinator.
  void deliver(const std::string& name, FakeWorker& worker, Message m) {
    switch (m.envelope.body_case()) {
      case v1::Envelope::kWelcome:
        coordinator->handle(as_received(name, worker.on_welcome(m)), now);
        break;
      case v1::Envelope::kPlan: {
        const uint64_t step = m.envelope.step();
        plans[step].push_back(m.envelope.plan());
        if (seen_plan) seen_plan(name, step, m.envelope.plan());
        Message contribution = worker.on_plan(m);
        if (tamper) tamper(name, step, contribution);
        coordinator->handle(as_received(name, std::move(contribution)), now);
        if (tick_in_pump) coordinator->tick(now);
        break;
      }
      case v1::Envelope::kUpdate:
        if (seen_update) seen_update(m);
        worker.on_update(m);
        break;
      case v1::Envelope::kBye:
        byes[name] = m.envelope.bye();
        break;
      default:
        break;
    }
  }

  // Every worker's parameters equal the coordinator's, bit for bit.
  void expect_replicas_identical() {
    for (auto& [name, worker] : workers) {
      EXPECT_EQ(worker.replica()->parameter_checksum(), replica->parameter_checksum()) << name;
    }
  }

  std::string run_file(const std::string& name) const {
    std::ifstream in(run_dir / name);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  MetricsRecords metrics() const {
    return parse_metrics(run_file("metrics.jsonl"), "metrics.jsonl");
  }

  double now = 0.0;
  std::filesystem::path run_dir;
  v1::RunConfig config;
  std::unique_ptr<Dataset> train;
  std::unique_ptr<Replica> replica;
  RecordingOutbox outbox;
  CapturedLog log;
  Evaluator* evaluator = nullptr;  // none unless a test sets one before start()
  // Evaluation off the step loop and live metrics, when a test sets them.
  EvaluationThread* evaluation_thread = nullptr;
  std::function<void(std::shared_ptr<const LiveSnapshot>)> publish_metrics;
  WallClock wall_clock;  // the coordinator's Unix microseconds; unset: the system's
  std::unique_ptr<Coordinator> coordinator;
  std::vector<std::string> order = {"a", "b", "c"};
  bool hello_on_start = false;
  std::map<std::string, FakeWorker> workers;
  // Every plan delivered, by step, in the order delivered; every goodbye.
  std::map<uint64_t, std::vector<v1::Plan>> plans;
  std::map<std::string, v1::Bye> byes;
  // Hooks, each optional: a plan as a worker receives it; a contribution
  // (worker, step) the hook may rewrite before the coordinator sees it; an
  // update before the worker applies it. With `tick_in_pump` the
  // coordinator ticks after every contribution, as the real loop does.
  std::function<void(const std::string&, uint64_t, const v1::Plan&)> seen_plan;
  std::function<void(const std::string&, uint64_t, Message&)> tamper;
  std::function<void(const Message&)> seen_update;
  bool tick_in_pump = false;

 private:
  std::optional<ScratchDir> scratch_;
  const char* config_text_;
  std::string label_;
};

}  // namespace dctrain::testing
