// The coordinator's logic in one process with a fake clock: joining, plans,
// the reduce and identical replicas, deadlines and dead workers (requeue),
// past-step and malformed messages, and the ledger's audit under drops.
#include "coordinator/coordinator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "common/version.h"
#include "tests/runtime/fake_cluster.h"

namespace dctrain {
namespace {

using testing::as_received;
using testing::CapturedLog;
using testing::FakeWorker;
using testing::RecordingOutbox;

const char* kConfig = R"(
name: "unit"
seed: 5
workers: 3
model { name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 24 micro_batch: 4 tau: inf }
liveness { heartbeat_seconds: 0.5 silence_seconds: 10 grace_seconds: 0.5 join_timeout_seconds: 120 }
stop { max_steps: 4 }
)";

Message roundtrip(Message m) {
  Message out;
  const auto problem = decode(encode(std::move(m)), out);
  EXPECT_FALSE(problem.has_value()) << *problem;
  return out;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_dir = std::filesystem::temp_directory_path() /
              fmt::format("dctrain-coordinator-test-{}-{}", ::getpid(),
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(run_dir);
    std::filesystem::create_directories(run_dir);
    config = parse_run_config(kConfig, "unit");
  }
  void TearDown() override { std::filesystem::remove_all(run_dir); }

  void start() {
    finalize_run_config(config);
    train = open_dataset(config, Split::kTrain, "");
    replica = std::make_unique<Replica>(testing::softmax_for(config), config.optimizer());
    CoordinatorSetup setup{config, train_samples(config, *train), run_dir, std::nullopt,
                           std::nullopt};
    coordinator = std::make_unique<Coordinator>(setup, *replica, nullptr, outbox, log.logger, now);
    for (const char* name : {"a", "b", "c"}) workers.emplace(name, FakeWorker(name, *train));
  }

  void hello(const std::string& name) {
    coordinator->handle(as_received(name, workers.at(name).hello()), now);
  }

  // Delivers queued messages to the workers (not the `silent` ones) and
  // their answers back, until nothing moves.
  void pump(const std::set<std::string>& silent = {}) {
    bool moved = true;
    while (moved) {
      moved = false;
      for (auto& [name, worker] : workers) {
        if (silent.contains(name)) continue;
        auto& queue = outbox.inbox[name];
        while (!queue.empty()) {
          Message m = roundtrip(std::move(queue.front()));
          queue.pop_front();
          moved = true;
          switch (m.envelope.body_case()) {
            case v1::Envelope::kWelcome: worker.on_welcome(m); break;
            case v1::Envelope::kPlan: {
              plans[m.envelope.step()].push_back(m.envelope.plan());
              coordinator->handle(as_received(name, worker.on_plan(m)), now);
              break;
            }
            case v1::Envelope::kUpdate: worker.on_update(m); break;
            case v1::Envelope::kBye: byes[name] = m.envelope.bye(); break;
            default: break;
          }
        }
      }
    }
  }

  std::set<uint64_t> planned_samples(uint64_t step, size_t plan_index) {
    std::set<uint64_t> out;
    for (const auto& mb : plans[step].at(plan_index).micro_batches()) out.insert(mb.samples().begin(), mb.samples().end());
    return out;
  }

  std::vector<std::string> metrics_lines(const std::string& type) {
    std::ifstream in(run_dir / "metrics.jsonl");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"type\":\"" + type + "\"") != std::string::npos) out.push_back(line);
    }
    return out;
  }

  double now = 0.0;
  std::filesystem::path run_dir;
  v1::RunConfig config;
  std::unique_ptr<Dataset> train;
  std::unique_ptr<Replica> replica;
  RecordingOutbox outbox;
  CapturedLog log;
  std::unique_ptr<Coordinator> coordinator;
  std::map<std::string, FakeWorker> workers;
  std::map<uint64_t, std::vector<v1::Plan>> plans;
  std::map<std::string, v1::Bye> byes;
};

TEST_F(CoordinatorTest, RunStartsWhenAllJoinedAndReplicasStayIdentical) {
  start();
  hello("a");
  hello("b");
  coordinator->tick(now);
  pump();
  EXPECT_TRUE(plans.empty()) << "no plan before the third worker joins";
  hello("c");
  coordinator->tick(now);
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0);
  EXPECT_EQ(coordinator->totals().steps(), 4u);
  EXPECT_EQ(coordinator->totals().checksum_mismatches(), 0u);
  for (auto& [name, worker] : workers) {
    EXPECT_EQ(worker.replica->parameter_checksum(), replica->parameter_checksum()) << name;
    ASSERT_TRUE(byes.contains(name));
    EXPECT_TRUE(byes[name].has_checksum());
    EXPECT_EQ(byes[name].parameter_checksum(), replica->parameter_checksum());
  }
  // Every step plans the whole global batch over the three workers, each
  // sample once.
  for (uint64_t step = 0; step < 4; ++step) {
    ASSERT_EQ(plans[step].size(), 3u);
    std::set<uint64_t> all;
    size_t count = 0;
    for (size_t i = 0; i < 3; ++i) {
      const auto s = planned_samples(step, i);
      count += s.size();
      all.insert(s.begin(), s.end());
    }
    EXPECT_EQ(count, 24u);
    EXPECT_EQ(all.size(), 24u);
  }
  EXPECT_EQ(metrics_lines("step").size(), 4u);
  EXPECT_TRUE(std::filesystem::exists(run_dir / "summary.json"));
}

TEST_F(CoordinatorTest, TauInfinityMatchesOneProcessOnTheSameMicroBatches) {
  start();
  for (const char* n : {"a", "b", "c"}) hello(n);
  coordinator->tick(now);
  pump();
  ASSERT_TRUE(coordinator->finished());

  // One process: the same micro-batches, gradients accumulated in one arena.
  Replica single(testing::softmax_for(config), config.optimizer());
  Model& model = single.model();
  Batch batch;
  std::vector<float> statistics(single.buffer_count());
  for (uint64_t step = 0; step < 4; ++step) {
    model.gradients().zero();
    model.statistics().zero();
    int64_t terms = 0, samples = 0;
    for (const v1::Plan& plan : plans[step]) {
      for (const auto& mb : plan.micro_batches()) {
        std::vector<uint64_t> ids(mb.samples().begin(), mb.samples().end());
        train->fill(ids, SampleContext{config.seed(), mb.epoch(), true}, batch);
        const MicroBatchResult r = model.train_micro_batch(batch);
        terms += r.loss_terms;
        samples += r.samples;
      }
    }
    std::span<float> g = model.gradients().flat();
    for (float& v : g) v /= static_cast<float>(terms);
    for (size_t i = 0; i < statistics.size(); ++i) {
      statistics[i] = model.statistics().flat()[i] / static_cast<float>(samples);
    }
    single.apply_update(g, statistics);
  }
  const auto a = single.model().parameters().flat();
  const auto b = replica->model().parameters().flat();
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, std::abs(double(a[i]) - b[i]));
  EXPECT_LT(max_diff, 1e-5);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(single.model().buffers().flat()[i], replica->model().buffers().flat()[i], 1e-5);
  }
}

TEST_F(CoordinatorTest, WorkerMissingTheDeadlineIsNamedAndItsMicroBatchesRequeued) {
  config.mutable_step()->set_tau(0.5);
  start();
  for (const char* n : {"a", "b", "c"}) hello(n);
  pump();  // welcomes
  coordinator->tick(now);
  pump({"b"});
  EXPECT_EQ(coordinator->step(), 0u) << "the step waits for b until the deadline";
  // Ranks follow the joining order: a=0, b=1, c=2. b's plan is still queued.
  ASSERT_EQ(outbox.inbox["b"].size(), 1u);
  Message b_plan = roundtrip(std::move(outbox.inbox["b"].front()));
  outbox.inbox["b"].pop_front();
  ASSERT_EQ(b_plan.envelope.body_case(), v1::Envelope::kPlan);
  std::set<uint64_t> b_samples;
  for (const auto& mb : b_plan.envelope.plan().micro_batches()) {
    b_samples.insert(mb.samples().begin(), mb.samples().end());
  }
  ASSERT_EQ(b_samples.size(), 8u);

  now = 1.1;  // past tau 0.5 + grace 0.5
  coordinator->tick(now);
  EXPECT_EQ(coordinator->step(), 1u);
  EXPECT_TRUE(log.contains("worker 'b' (rank 1) is out of step 0 because it missed the deadline"))
      << log.text.str();
  EXPECT_EQ(coordinator->totals().microbatches_orphaned(), 2u);

  // b answers step 0 late: a contribution for a past step is discarded.
  coordinator->handle(as_received("b", workers.at("b").on_plan(b_plan)), now);
  EXPECT_TRUE(log.contains("discarded worker 'b' (rank 1)'s contribution for past step 0"))
      << log.text.str();
  EXPECT_EQ(coordinator->step(), 1u);

  // Step 1 plans b's samples first: they went back to the head of the queue.
  pump();
  std::set<uint64_t> step1;
  for (size_t i = 0; i < plans[1].size(); ++i) {
    for (uint64_t s : planned_samples(1, i)) step1.insert(s);
  }
  for (uint64_t s : b_samples) EXPECT_TRUE(step1.contains(s)) << "sample " << s << " not requeued";
  // b applied step 0's update like everyone: the replicas still agree.
  ASSERT_TRUE(coordinator->finished());
  EXPECT_EQ(coordinator->totals().checksum_mismatches(), 0u);
  for (auto& [name, worker] : workers) {
    EXPECT_EQ(worker.replica->parameter_checksum(), replica->parameter_checksum()) << name;
  }
}

TEST_F(CoordinatorTest, SilentWorkerIsPresumedDeadAndRejoinsWithTheCurrentState) {
  config.mutable_stop()->set_max_steps(6);
  start();
  for (const char* n : {"a", "b", "c"}) hello(n);
  pump();
  coordinator->tick(now);
  pump({"c"});
  EXPECT_EQ(coordinator->step(), 0u);
  now = 10.6;  // c silent for longer than silence_seconds; a and b heartbeat
  for (const char* n : {"a", "b"}) {
    Message hb;
    hb.envelope = make_envelope(0, n);
    hb.envelope.mutable_heartbeat()->set_sent_unix_micros(1);
    coordinator->handle(as_received(n, std::move(hb)), now);
  }
  coordinator->tick(now);
  EXPECT_TRUE(log.contains("worker 'c' (rank 2) silent for")) << log.text.str();
  EXPECT_TRUE(log.contains("worker 'c' (rank 2) is out of step 0 because it died"));
  EXPECT_EQ(coordinator->step(), 1u) << "the step completed with a and b";
  pump({"c"});
  EXPECT_EQ(coordinator->step(), 6u) << "the run went on with two workers";
  ASSERT_TRUE(coordinator->finished());
  EXPECT_EQ(plans[1].size(), 2u);
}

TEST_F(CoordinatorTest, RestartedWorkerIsWelcomedWithTheCurrentModelAndJoinsTheNextStep) {
  config.mutable_stop()->set_max_steps(6);
  start();
  for (const char* n : {"a", "b", "c"}) hello(n);
  pump();
  coordinator->tick(now);
  pump({"c"});
  now = 10.6;
  for (const char* n : {"a", "b"}) {
    Message hb;
    hb.envelope = make_envelope(0, n);
    hb.envelope.mutable_heartbeat()->set_sent_unix_micros(1);
    coordinator->handle(as_received(n, std::move(hb)), now);
  }
  coordinator->tick(now);  // c presumed dead; step 0 closed, step 1 planned for a and b
  ASSERT_EQ(coordinator->step(), 1u);
  // c restarts: its old messages are gone with the process.
  outbox.inbox["c"].clear();
  workers.erase("c");
  workers.emplace("c", FakeWorker("c", *train));
  hello("c");
  EXPECT_TRUE(log.contains("worker 'c' joined as rank 2"));
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(plans[1].size(), 2u);
  EXPECT_EQ(plans[2].size(), 3u) << "c is planned again from the next step";
  EXPECT_EQ(coordinator->totals().checksum_mismatches(), 0u);
  for (auto& [name, worker] : workers) {
    EXPECT_EQ(worker.replica->parameter_checksum(), replica->parameter_checksum()) << name;
  }
}

TEST_F(CoordinatorTest, GarbageTruncatedAndWrongVersionMessagesAreLoggedAndDropped) {
  start();
  for (const char* n : {"a", "b", "c"}) hello(n);
  pump();
  coordinator->tick(now);

  std::vector<zmq::message_t> garbage;
  garbage.emplace_back(std::string("\x13\x37 not a protobuf at all \xff\xfe"));
  coordinator->handle(Received{"intruder", std::move(garbage)}, now);
  EXPECT_TRUE(log.contains("dropped a message from peer 'intruder'"));

  coordinator->handle(Received{"intruder", {}}, now);
  EXPECT_TRUE(log.contains("empty message"));

  Message old = workers.at("a").hello();
  old.envelope.set_protocol_version(kProtocolVersion + 7);
  old.envelope.set_sender("old");
  old.envelope.mutable_hello()->set_worker_name("old");
  coordinator->handle(as_received("old", std::move(old)), now);
  ASSERT_FALSE(outbox.inbox["old"].empty());
  const Message refusal = roundtrip(std::move(outbox.inbox["old"].front()));
  ASSERT_EQ(refusal.envelope.body_case(), v1::Envelope::kRefusal);
  EXPECT_NE(refusal.envelope.refusal().reason().find(fmt::format("protocol version {}", kProtocolVersion + 7)),
            std::string::npos);

  // A contribution from a member with a truncated gradient frame, then one
  // with NaN: both rejected; the truncated one never parses, the NaN one
  // takes the worker out of the step.
  Message plan = roundtrip(std::move(outbox.inbox["a"].front()));
  outbox.inbox["a"].pop_front();
  Message good = workers.at("a").on_plan(plan);
  std::vector<zmq::message_t> parts = encode(std::move(good));
  parts[1] = zmq::message_t(parts[1].data(), parts[1].size() - 4);
  coordinator->handle(Received{"a", std::move(parts)}, now);
  EXPECT_TRUE(log.contains("tensor 'gradient': frame 1 has")) << log.text.str();

  Message poisoned = workers.at("a").on_plan(plan);
  poisoned.frames.clear();
  poisoned.envelope.clear_tensors();
  std::vector<float> nan_gradient(replica->parameter_count(), std::nanf(""));
  add_tensor(poisoned, "gradient", nan_gradient);
  std::vector<float> stats(replica->buffer_count(), 0.0f);
  add_tensor(poisoned, "statistics", stats);
  coordinator->handle(as_received("a", std::move(poisoned)), now);
  EXPECT_TRUE(log.contains("rejected worker 'a' (rank 0)'s contribution for step 0"));

  // A contribution from a stranger: it is asked to say hello.
  Message stranger = workers.at("b").on_plan(plan);
  stranger.envelope.set_sender("stranger");
  coordinator->handle(as_received("stranger", std::move(stranger)), now);
  EXPECT_TRUE(log.contains("asked peer 'stranger' to say hello again"));

  // Training goes on and finishes.
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0);
  EXPECT_EQ(coordinator->totals().steps(), 4u);
  EXPECT_EQ(coordinator->totals().checksum_mismatches(), 0u);
}

TEST_F(CoordinatorTest, DroppedMicroBatchesAreRequeuedAndEveryEpochAuditsClean) {
  // Each micro-batch takes at least 10 ms (injected): past tau = 5 ms, every
  // worker stops after its first micro-batch.
  config.mutable_step()->set_tau(0.005);
  config.mutable_delay()->set_kind("constant");
  config.mutable_delay()->set_seconds(0.01);
  config.mutable_stop()->set_max_steps(0);
  config.mutable_stop()->set_max_epochs(2);
  start();
  for (const char* n : {"a", "b", "c"}) hello(n);
  pump();
  coordinator->tick(now);
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  const v1::RunTotals& t = coordinator->totals();
  EXPECT_GT(t.microbatches_dropped(), 0u);
  EXPECT_EQ(t.samples_lost(), 0u);
  EXPECT_EQ(t.samples_completed(), 2u * 240u);
  EXPECT_EQ(t.epochs_completed(), 2u);
  EXPECT_EQ(t.audits_failed(), 0u);
  const auto epochs = metrics_lines("epoch");
  ASSERT_EQ(epochs.size(), 2u);
  for (const std::string& e : epochs) {
    EXPECT_NE(e.find("\"audit_ok\":true"), std::string::npos) << e;
    EXPECT_NE(e.find("\"done\":240"), std::string::npos) << e;
  }
}

TEST_F(CoordinatorTest, WithoutRequeueDroppedSamplesAreLostAsInDropCompute) {
  config.mutable_step()->set_tau(0.005);
  config.mutable_delay()->set_kind("constant");
  config.mutable_delay()->set_seconds(0.01);
  config.mutable_step()->set_requeue(false);
  config.mutable_stop()->set_max_steps(0);
  config.mutable_stop()->set_max_epochs(1);
  start();
  for (const char* n : {"a", "b", "c"}) hello(n);
  pump();
  coordinator->tick(now);
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  const v1::RunTotals& t = coordinator->totals();
  EXPECT_GT(t.samples_lost(), 0u);
  EXPECT_EQ(t.samples_completed() + t.samples_lost(), 240u);
  EXPECT_EQ(t.audits_failed(), 0u);
}

TEST_F(CoordinatorTest, TooFewWorkersWithinTheJoinTimeoutFailsClearly) {
  start();
  hello("a");
  hello("b");
  for (now = 1.0; now < 121.5; now += 1.0) {
    for (const char* n : {"a", "b"}) {
      Message hb;
      hb.envelope = make_envelope(0, n);
      hb.envelope.mutable_heartbeat()->set_sent_unix_micros(1);
      coordinator->handle(as_received(n, std::move(hb)), now);
    }
    coordinator->tick(now);
  }
  ASSERT_TRUE(coordinator->finished());
  EXPECT_EQ(coordinator->exit_code(), 1);
  EXPECT_NE(coordinator->stop_reason().find("only 2 of 3 workers joined"), std::string::npos);
}

TEST_F(CoordinatorTest, FourthWorkerIsRefusedWhileAllSlotsAreLive) {
  start();
  for (const char* n : {"a", "b", "c"}) hello(n);
  workers.emplace("d", FakeWorker("d", *train));
  hello("d");
  ASSERT_FALSE(outbox.inbox["d"].empty());
  const Message refusal = roundtrip(std::move(outbox.inbox["d"].front()));
  EXPECT_EQ(refusal.envelope.body_case(), v1::Envelope::kRefusal);
  EXPECT_TRUE(log.contains("already has its 3 workers"));
}

}  // namespace
}  // namespace dctrain
