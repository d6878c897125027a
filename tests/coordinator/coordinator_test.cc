// The coordinator's logic in one process with a fake clock: joining, plans,
// the reduce and identical replicas, deadlines and dead workers (requeue),
// past-step and malformed messages, and the ledger's audit under drops.
#include "coordinator/coordinator.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "common/source_version.h"
#include "common/version.h"
#include "coordinator/evaluation_thread.h"
#include "coordinator/evaluator.h"
#include "coordinator/live_metrics.h"
#include "metrics/metrics_json.h"
#include "tests/coordinator/coordinator_fixture.h"
#include "tests/testing/fake_cluster.h"

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

class CoordinatorTest : public testing::CoordinatorFixture {
 public:  // the helpers below drive it too
  CoordinatorTest() : CoordinatorFixture(kConfig, "coordinator") {
    // With `capture`, pump() keeps each contribution's gradient and each
    // step's update.
    tamper = [this](const std::string& name, uint64_t step, Message& contribution) {
      if (!capture) return;
      std::vector<float>& g = contributed[step][name];
      g.resize(replica->parameter_count());
      copy_tensor(contribution, 0, g);
    };
    seen_update = [this](const Message& m) {
      if (!capture || updates[m.envelope.step()].has_value()) return;
      std::vector<float> g(replica->parameter_count());
      copy_tensor(m, 0, g);
      updates[m.envelope.step()] = std::move(g);
    };
  }

  // A heartbeat from `name` reaches the coordinator now.
  void heartbeat(const std::string& name) {
    Message hb;
    hb.envelope = make_envelope(0, name);
    hb.envelope.mutable_heartbeat()->set_sent_unix_micros(1);
    coordinator->handle(as_received(name, std::move(hb)), now);
  }

  // Heartbeats from `names` every second from now + 1 s while before
  // `until`, the coordinator ticking after each second's.
  void heartbeats_until(std::initializer_list<const char*> names, double until) {
    for (now += 1.0; now < until; now += 1.0) {
      for (const char* n : names) heartbeat(n);
      coordinator->tick(now);
    }
  }

  // The three workers say hello and take their welcomes: the run starts.
  void join_all() {
    for (const char* n : {"a", "b", "c"}) hello(n);
    welcome_all();
  }

  // Delivers only the welcomes at the head of each queue, and the workers'
  // Ready answers (the last of which starts the run): plans stay queued.
  void welcome_all() {
    for (auto& [name, worker] : workers) {
      auto& queue = outbox.inbox[name];
      while (!queue.empty() && queue.front().envelope.body_case() == v1::Envelope::kWelcome) {
        Message m = roundtrip(std::move(queue.front()));
        queue.pop_front();
        coordinator->handle(as_received(name, worker.on_welcome(m)), now);
      }
    }
  }

  std::set<uint64_t> planned_samples(uint64_t step, size_t plan_index) {
    std::set<uint64_t> out;
    for (const auto& mb : plans[step].at(plan_index).micro_batches())
      out.insert(mb.samples().begin(), mb.samples().end());
    return out;
  }

  bool capture = false;
  std::map<uint64_t, std::map<std::string, std::vector<float>>> contributed;
  std::map<uint64_t, std::optional<std::vector<float>>> updates;
};

// An evaluation that takes `seconds` on the coordinator's (fake) clock.
class SlowEvaluator : public Evaluator {
 public:
  SlowEvaluator(double& now, double seconds) : now_(now), seconds_(seconds) {}
  Evaluation evaluate(Model&) override {
    now_ += seconds_;
    ++count;
    return Evaluation{1.0, 0.5, 100};
  }
  int count = 0;

 private:
  double& now_;
  double seconds_;
};

// The gradient sum of a step's contributions in rank order (a, b, c), as
// the reducer adds them, divided as the reducer divides.
std::vector<float> reduced(const std::map<std::string, std::vector<float>>& by_worker,
                           double divisor) {
  std::vector<float> sum(by_worker.begin()->second.size(), 0.0f);
  for (const auto& [name, g] : by_worker) {
    for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
  }
  const auto d = static_cast<float>(divisor);
  for (float& v : sum) v /= d;
  return sum;
}

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
    EXPECT_EQ(worker.replica()->parameter_checksum(), replica->parameter_checksum()) << name;
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
  EXPECT_EQ(metrics().steps.size(), 4u);
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
  for (size_t i = 0; i < a.size(); ++i)
    max_diff = std::max(max_diff, std::abs(double(a[i]) - b[i]));
  EXPECT_LT(max_diff, 1e-5);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(single.model().buffers().flat()[i], replica->model().buffers().flat()[i], 1e-5);
  }
}

TEST_F(CoordinatorTest, WorkerMissingTheDeadlineIsNamedAndItsMicroBatchesRequeued) {
  config.mutable_step()->set_tau(0.5);
  start();
  join_all();
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
  expect_replicas_identical();
}

TEST_F(CoordinatorTest, SilentWorkerIsPresumedDeadAndRejoinsWithTheCurrentState) {
  config.mutable_stop()->set_max_steps(6);
  start();
  join_all();
  coordinator->tick(now);
  pump({"c"});
  EXPECT_EQ(coordinator->step(), 0u);
  now = 10.6;  // c silent for longer than silence_seconds; a and b heartbeat
  for (const char* n : {"a", "b"}) heartbeat(n);
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
  join_all();
  coordinator->tick(now);
  pump({"c"});
  now = 10.6;
  for (const char* n : {"a", "b"}) heartbeat(n);
  coordinator->tick(now);  // c presumed dead; step 0 closed, step 1 planned for a and b
  ASSERT_EQ(coordinator->step(), 1u);
  // c restarts: its old messages are gone with the process.
  outbox.inbox["c"].clear();
  workers.erase("c");
  workers.emplace("c", FakeWorker("c", *train));
  hello("c");
  EXPECT_TRUE(log.contains("worker 'c' joined as rank 2"));
  welcome_all();  // c has loaded its data (said Ready) while step 1 runs
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(plans[1].size(), 2u);
  EXPECT_EQ(plans[2].size(), 3u) << "c is planned again from the next step";
  EXPECT_EQ(coordinator->totals().checksum_mismatches(), 0u);
  expect_replicas_identical();
}

TEST_F(CoordinatorTest, GarbageTruncatedAndWrongVersionMessagesAreLoggedAndDropped) {
  start();
  join_all();
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
  EXPECT_NE(refusal.envelope.refusal().reason().find(
                fmt::format("protocol version {}", kProtocolVersion + 7)),
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

// Found while hardening the coordinator: a contribution's loss terms and
// correct count were never checked (the step's loss, accuracy and gradient
// divisor are divided by the summed terms), and a late contribution's times
// went into the per-worker summary unchecked.
TEST_F(CoordinatorTest, AWorkerOfAnotherBuildJoinsAndTheLogSaysTheBuildsDiffer) {
  start();
  hello("a");
  EXPECT_FALSE(log.contains("the builds differ")) << "a worker of this build";
  Message other = workers.at("b").hello();
  other.envelope.mutable_hello()->set_software_version("0.0.9+0123456789ab");
  coordinator->handle(as_received("b", std::move(other)), now);
  EXPECT_TRUE(log.contains(fmt::format(
      "worker 'b' runs dctrain 0.0.9+0123456789ab, this coordinator {}: the builds differ (both "
      "speak protocol {})",
      source_version(), kProtocolVersion)))
      << log.text.str();
  EXPECT_TRUE(log.contains("worker 'b' joined as rank 1")) << "it joins all the same";
}

TEST_F(CoordinatorTest, ImpossibleLossTermsAreRejectedAndBadTimesStayOutOfTheSummary) {
  start();
  join_all();
  coordinator->tick(now);
  Message plan_a = roundtrip(std::move(outbox.inbox["a"].front()));
  outbox.inbox["a"].pop_front();
  Message plan_b = roundtrip(std::move(outbox.inbox["b"].front()));
  outbox.inbox["b"].pop_front();

  // a: more loss terms than its samples can give (a classifier: one each).
  Message inflated = workers.at("a").on_plan(plan_a);
  Message late = roundtrip(share(inflated));
  v1::Contribution& a = *inflated.envelope.mutable_contribution();
  ASSERT_GT(a.samples(), 0u);
  a.set_loss_terms(a.samples() * 1000);
  coordinator->handle(as_received("a", std::move(inflated)), now);
  EXPECT_TRUE(log.contains(fmt::format(
      "rejected worker 'a' (rank 0)'s contribution for step 0: it claims {} loss terms from {} "
      "samples",
      a.samples() * 1000, a.samples())))
      << log.text.str();

  // b: more correct predictions than loss terms.
  Message boasting = workers.at("b").on_plan(plan_b);
  v1::Contribution& b = *boasting.envelope.mutable_contribution();
  b.set_correct(b.loss_terms() + 1);
  coordinator->handle(as_received("b", std::move(boasting)), now);
  EXPECT_TRUE(log.contains("rejected worker 'b' (rank 1)'s contribution for step 0: it claims"))
      << log.text.str();

  // Training goes on; then a's step-0 contribution arrives late with a NaN
  // micro-batch time: discarded, and left out of the summary.
  pump();
  Message nan_time = std::move(late);
  nan_time.envelope.mutable_contribution()->mutable_completed(0)->set_compute_seconds(std::nan(""));
  coordinator->handle(as_received("a", std::move(nan_time)), now);
  EXPECT_TRUE(
      log.contains("worker 'a' (rank 0)'s contribution for step 0 has negative or "
                   "non-finite times, or more samples than its micro-batches hold: left out of "
                   "the per-worker summary"))
      << log.text.str();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0);
  const v1::RunSummary summary = parse_summary(run_file("summary.json"), "summary.json");
  ASSERT_GT(summary.per_worker_size(), 0);
  for (const v1::PerWorkerTotals& w : summary.per_worker()) {
    EXPECT_TRUE(std::isfinite(w.mean_micro_batch_seconds())) << w.DebugString();
    EXPECT_TRUE(std::isfinite(w.mean_communication_seconds())) << w.DebugString();
  }
}

TEST_F(CoordinatorTest, ARunningWorkersNameIsBoundToTheKeyItJoinedWith) {
  // The workers joined with their keys (here: plain links, key ""); a hello
  // and a contribution under a running worker's name from another CURVE key
  // are refused, and the run goes on with the worker that holds the name.
  start();
  join_all();
  coordinator->tick(now);
  const size_t queued_for_b = outbox.inbox["b"].size();
  Received impostor = as_received("b", workers.at("b").hello());
  impostor.key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
  coordinator->handle(std::move(impostor), now);
  EXPECT_TRUE(log.contains("that name belongs to the running worker")) << log.text.str();
  ASSERT_EQ(outbox.inbox["b"].size(), queued_for_b + 1);
  const Message refusal = roundtrip(std::move(outbox.inbox["b"].back()));
  outbox.inbox["b"].pop_back();
  ASSERT_EQ(refusal.envelope.body_case(), v1::Envelope::kRefusal);
  EXPECT_NE(refusal.envelope.refusal().reason().find("another key"), std::string::npos);
  EXPECT_FALSE(log.contains("said hello again")) << "the impostor must not replace 'b'";

  // A contribution under 'a' from another key is not a's.
  ASSERT_FALSE(outbox.inbox["a"].empty());
  Message plan = roundtrip(std::move(outbox.inbox["a"].front()));
  ASSERT_EQ(plan.envelope.body_case(), v1::Envelope::kPlan);
  outbox.inbox["a"].pop_front();
  Received forged = as_received("a", workers.at("a").on_plan(plan));
  forged.key = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
  coordinator->handle(std::move(forged), now);
  EXPECT_TRUE(log.contains("refused a contribution from peer 'a'")) << log.text.str();
  // The real 'a' gets its plan again and the run finishes with a, b and c.
  outbox.inbox["a"].push_front(std::move(plan));
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
  config.mutable_delay()->set_kind(v1::DELAY_CONSTANT);
  config.mutable_delay()->set_seconds(0.01);
  config.mutable_stop()->set_max_steps(0);
  config.mutable_stop()->set_max_epochs(2);
  start();
  join_all();
  coordinator->tick(now);
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  const v1::RunTotals& t = coordinator->totals();
  EXPECT_GT(t.microbatches_dropped(), 0u);
  EXPECT_EQ(t.samples_lost(), 0u);
  EXPECT_EQ(t.samples_completed(), 2u * 240u);
  EXPECT_EQ(t.epochs_completed(), 2u);
  EXPECT_EQ(t.audits_failed(), 0u);
  const auto epochs = metrics().epochs;
  ASSERT_EQ(epochs.size(), 2u);
  for (const v1::EpochRecord& e : epochs) {
    EXPECT_TRUE(e.audit_ok()) << e.ShortDebugString();
    EXPECT_EQ(e.done(), 240u) << e.ShortDebugString();
  }
}

TEST_F(CoordinatorTest, WithoutRequeueDroppedSamplesAreLostAsInDropCompute) {
  config.mutable_step()->set_tau(0.005);
  config.mutable_delay()->set_kind(v1::DELAY_CONSTANT);
  config.mutable_delay()->set_seconds(0.01);
  config.mutable_step()->set_requeue(false);
  config.mutable_stop()->set_max_steps(0);
  config.mutable_stop()->set_max_epochs(1);
  start();
  join_all();
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
  heartbeats_until({"a", "b"}, 121.5);
  ASSERT_TRUE(coordinator->finished());
  EXPECT_EQ(coordinator->exit_code(), 1);
  EXPECT_NE(coordinator->stop_reason().find("only 2 of 3 workers joined"), std::string::npos);
}

TEST_F(CoordinatorTest, WithMinWorkersTheRunStartsWithTheReadyOnesAtTheJoinTimeout) {
  config.mutable_liveness()->set_min_workers(2);
  start();
  hello("a");
  hello("b");
  welcome_all();
  heartbeats_until({"a", "b"}, 119.5);
  for (const char* n : {"a", "b"}) {
    for (const Message& m : outbox.inbox[n])
      EXPECT_NE(m.envelope.body_case(), v1::Envelope::kPlan) << n << ": a plan before the timeout";
  }
  heartbeats_until({"a", "b"}, 121.5);
  EXPECT_TRUE(log.contains("2 of 3 workers joined and loaded their data within 120 s"))
      << log.text.str();
  // c comes during step 0: planned from step 1.
  hello("c");
  welcome_all();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0);
  EXPECT_EQ(plans[0].size(), 2u);
  EXPECT_EQ(plans[1].size(), 3u);
  EXPECT_EQ(coordinator->totals().microbatches_orphaned(), 0u);
  expect_replicas_identical();
}

TEST_F(CoordinatorTest, WithMinWorkersTooFewReadyAtTheJoinTimeoutFailsClearly) {
  config.mutable_liveness()->set_min_workers(2);
  start();
  hello("a");
  welcome_all();
  hello("b");  // joined, its data not loaded: not ready
  heartbeats_until({"a", "b"}, 121.5);
  ASSERT_TRUE(coordinator->finished());
  EXPECT_EQ(coordinator->exit_code(), 1);
  EXPECT_NE(coordinator->stop_reason().find(
                "only 2 of 3 workers joined within 120 s (1 ready, at least 2 needed)"),
            std::string::npos)
      << coordinator->stop_reason();
  EXPECT_TRUE(plans.empty());
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

TEST_F(CoordinatorTest, SlowEvaluationNeverMakesAWorkerMissTheNextStep) {
  // An evaluation after every step takes 5 s on the coordinator's clock,
  // ten times tau + grace. The next step's clock starts when its plans go
  // out, after the evaluation: nobody misses, and step_seconds holds only
  // the step (0 here: the fake workers answer at once).
  config.mutable_step()->set_tau(0.5);
  config.mutable_eval()->set_every_steps(1);
  SlowEvaluator slow(now, 5.0);
  evaluator = &slow;
  tick_in_pump = true;
  start();
  join_all();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->totals().steps(), 4u);
  EXPECT_EQ(coordinator->totals().microbatches_orphaned(), 0u) << log.text.str();
  EXPECT_FALSE(log.contains("missed the deadline")) << log.text.str();
  EXPECT_EQ(slow.count, 4);
  const auto steps = metrics().steps;
  ASSERT_EQ(steps.size(), 4u);
  for (const v1::StepRecord& r : steps) {
    EXPECT_EQ(r.step_seconds(), 0.0) << r.ShortDebugString();
    EXPECT_EQ(r.eval_seconds(), 5.0) << r.ShortDebugString();
    EXPECT_EQ(r.checkpoint_seconds(), 0.0) << r.ShortDebugString();
  }
}

// Fails its first evaluation (it throws), then gives a result.
class FailingOnceEvaluator : public Evaluator {
 public:
  Evaluation evaluate(Model&) override {
    if (++count == 1) throw std::runtime_error("the held-out file went away");
    return Evaluation{1.0, 0.5, 100};
  }
  std::atomic<int> count = 0;
};

// On the step loop and on the evaluation thread alike: the failure is
// logged with the step, no record is written for it, the next evaluation is
// recorded, and the run ends normally.
void expect_a_failed_evaluation_is_logged_and_the_run_goes_on(CoordinatorTest& t, bool on_thread) {
  t.config.mutable_eval()->set_every_steps(2);
  FailingOnceEvaluator failing;
  t.evaluator = &failing;
  v1::RunConfig finalized = t.config;
  finalize_run_config(finalized);
  std::optional<EvaluationThread> thread;
  if (on_thread) thread.emplace(failing, testing::softmax_for(finalized));
  t.evaluation_thread = on_thread ? &*thread : nullptr;
  t.start();
  t.join_all();
  t.pump();
  ASSERT_TRUE(t.coordinator->finished()) << t.log.text.str();
  EXPECT_EQ(t.coordinator->exit_code(), 0);
  EXPECT_TRUE(t.log.contains("evaluation of step 2 failed: the held-out file went away"))
      << t.log.text.str();
  const MetricsRecords m = t.metrics();
  ASSERT_EQ(m.steps.size(), 4u);
  ASSERT_EQ(m.evals.size(), 1u) << "the failed one is not recorded";
  EXPECT_EQ(m.evals[0].step(), 4u);
  t.coordinator.reset();  // before the thread and the evaluator it uses
}

TEST_F(CoordinatorTest, AnEvaluatorThatThrowsOnTheStepLoopIsAFailedEvaluationAndTheRunGoesOn) {
  expect_a_failed_evaluation_is_logged_and_the_run_goes_on(*this, false);
}

TEST_F(CoordinatorTest, AnEvaluatorThatThrowsOnTheThreadIsAFailedEvaluationAndTheRunGoesOn) {
  expect_a_failed_evaluation_is_logged_and_the_run_goes_on(*this, true);
}

TEST_F(CoordinatorTest, StepZeroStartsOnceEveryWorkerHasLoadedItsData) {
  // The workers take 20 s to load their data after their welcome (they
  // heartbeat meanwhile). No plan goes out before every worker said Ready,
  // so the first step's deadline counts from then.
  config.mutable_step()->set_tau(0.5);
  tick_in_pump = true;
  start();
  for (const char* n : {"a", "b", "c"}) hello(n);
  coordinator->tick(now);
  heartbeats_until({"a", "b", "c"}, 20.5);
  for (const char* n : {"a", "b", "c"}) {
    for (const Message& m : outbox.inbox[n])
      EXPECT_NE(m.envelope.body_case(), v1::Envelope::kPlan) << n;
  }
  welcome_all();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->totals().microbatches_orphaned(), 0u) << log.text.str();
  const auto steps = metrics().steps;
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].step_seconds(), 0.0) << steps[0].ShortDebugString();
}

TEST_F(CoordinatorTest, AutoTauOverheadLeavesOutEvaluationsAndTheStartUp) {
  // Evaluations of 5 s after every step: the threshold's overhead is the
  // time outside compute on the step's own clock (0 with the fake clock),
  // not the evaluation.
  config.mutable_step()->set_tau_policy(v1::TAU_POLICY_AUTO);
  config.mutable_step()->mutable_auto_tau()->set_warmup_steps(2);
  config.mutable_step()->mutable_auto_tau()->set_reestimate_every_steps(1);
  config.mutable_step()->mutable_auto_tau()->set_skip_steps(1);
  config.mutable_eval()->set_every_steps(1);
  config.mutable_stop()->set_max_steps(6);
  SlowEvaluator slow(now, 5.0);
  evaluator = &slow;
  start();
  join_all();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  const auto taus = metrics().taus;
  ASSERT_EQ(taus.size(), 4u) << "step 0 skipped, 1-2 the warm-up, then an estimate after 3, 4, 5";
  EXPECT_EQ(taus[0].step(), 2u) << taus[0].ShortDebugString();
  EXPECT_EQ(taus[0].steps(), 2u) << taus[0].ShortDebugString();
  for (const v1::TauRecord& r : taus) EXPECT_EQ(r.overhead_seconds(), 0.0) << r.ShortDebugString();
}

TEST_F(CoordinatorTest, WorkerMissingManyDeadlinesInARowIsReleasedAndTheRunGoesOn) {
  config.mutable_step()->set_tau(0.5);
  config.mutable_liveness()->set_release_after_missed_steps(3);
  config.mutable_stop()->set_max_steps(8);
  start();
  join_all();
  // b heartbeats but never computes: it misses every deadline.
  for (int round = 0; round < 8 && !coordinator->finished(); ++round) {
    pump({"b"});
    now += 1.1;  // past tau 0.5 + grace 0.5
    heartbeat("b");
    coordinator->tick(now);
  }
  pump({"b"});
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0);
  EXPECT_TRUE(
      log.contains("worker 'b' (rank 1) released from the run after missing 3 step deadlines"))
      << log.text.str();
  EXPECT_EQ(coordinator->totals().workers_released(), 1u);
  bool told = false;
  for (const Message& m : outbox.inbox["b"])
    told |= m.envelope.has_bye() && m.envelope.bye().released();
  EXPECT_TRUE(told) << "b is told it was released";
  // Three steps waited for b; the later ones plan only a and c.
  EXPECT_EQ(plans[3].size(), 2u);
  EXPECT_EQ(plans[7].size(), 2u);
  EXPECT_EQ(coordinator->totals().steps(), 8u);
  const v1::RunSummary summary = parse_summary(run_file("summary.json"), "summary.json");
  ASSERT_FALSE(summary.released_workers().empty()) << summary.ShortDebugString();
  const v1::ReleasedWorker& released = summary.released_workers(0);
  EXPECT_EQ(released.name(), "b");
  EXPECT_EQ(released.rank(), 1u);
  EXPECT_EQ(released.step(), 2u);
  EXPECT_EQ(released.missed_in_a_row(), 3u);
}

TEST_F(CoordinatorTest, ChecksumMismatchDropsTheContributionAndResyncsTheReplica) {
  start();
  join_all();
  // b's replica drifts from the others (a bit flip, a bad update...).
  workers.at("b").replica()->model().parameters().flat()[0] += 1e-3f;
  capture = true;
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->totals().checksum_mismatches(), 1u);
  EXPECT_TRUE(log.contains("worker 'b' (rank 1) is out of step 0 because its replica differs"))
      << log.text.str();
  EXPECT_TRUE(log.contains("resending the coordinator's state to worker 'b'")) << log.text.str();
  // Step 0's update holds a's and c's gradients only, over their samples.
  auto step0 = contributed[0];
  step0.erase("b");
  ASSERT_TRUE(updates[0].has_value());
  EXPECT_EQ(*updates[0], reduced(step0, 16.0)) << "b's gradient stayed out of the update";
  // Its micro-batches were requeued: planned first in step 1.
  std::set<uint64_t> b0, step1;
  for (const auto& p : plans[0]) {
    if (&p == &plans[0][1]) {
      for (const auto& mb : p.micro_batches()) b0.insert(mb.samples().begin(), mb.samples().end());
    }
  }
  for (size_t i = 0; i < plans[1].size(); ++i) {
    for (uint64_t id : planned_samples(1, i)) step1.insert(id);
  }
  for (uint64_t id : b0) EXPECT_TRUE(step1.contains(id)) << id;
  // From step 1 on b computes on the coordinator's parameters again.
  EXPECT_EQ(plans[1].size(), 3u);
  expect_replicas_identical();
}

TEST_F(CoordinatorTest, NominalNormalizationDividesByThePlannedSamples) {
  // Every worker stops after its first micro-batch (tau 5 ms, 10 ms of
  // delay each): 3 of 6 micro-batches complete, 12 of 24 samples.
  config.mutable_step()->set_tau(0.005);
  config.mutable_step()->set_normalize(v1::NORMALIZE_NOMINAL);
  config.mutable_delay()->set_kind(v1::DELAY_CONSTANT);
  config.mutable_delay()->set_seconds(0.01);
  config.mutable_stop()->set_max_steps(1);
  capture = true;
  start();
  join_all();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  ASSERT_TRUE(updates[0].has_value());
  ASSERT_EQ(coordinator->totals().samples_completed(), 12u);
  EXPECT_EQ(*updates[0], reduced(contributed[0], 24.0)) << "sum over the 24 planned samples";
  EXPECT_NE(*updates[0], reduced(contributed[0], 12.0));
}

TEST_F(CoordinatorTest, ShortStepAtTheEndOfAnEpochIsWeightedByItsSize) {
  // 240 samples in steps of 36: six full steps, then one of 24 samples.
  config.mutable_step()->set_global_batch(36);
  config.mutable_stop()->set_max_steps(7);
  capture = true;
  start();
  join_all();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  ASSERT_TRUE(updates[6].has_value());
  EXPECT_EQ(coordinator->totals().epochs_completed(), 1u);
  EXPECT_EQ(*updates[5], reduced(contributed[5], 36.0));
  EXPECT_EQ(*updates[6], reduced(contributed[6], 36.0)) << "24 samples weigh 24/36 of a full step";
}

TEST_F(CoordinatorTest, ScheduleSizedInEpochsSpansThemWhateverRequeueAdds) {
  // A cosine schedule over 2 epochs, with half of every step dropped and
  // requeued: the run takes about twice the nominal 20 steps. The schedule
  // counts samples, so the rate falls smoothly to the end of epoch 2
  // instead of reaching 0 halfway.
  config.mutable_step()->set_tau(0.005);
  config.mutable_delay()->set_kind(v1::DELAY_CONSTANT);
  config.mutable_delay()->set_seconds(0.01);
  config.mutable_optimizer()->mutable_schedule()->set_kind(v1::SCHEDULE_COSINE);
  config.mutable_stop()->set_max_steps(0);
  config.mutable_stop()->set_max_epochs(2);
  start();
  join_all();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  const auto steps = metrics().steps;
  ASSERT_GT(steps.size(), 30u) << "requeue adds steps";
  uint64_t settled = 0;
  for (const v1::StepRecord& r : steps) {
    const double expected =
        0.1 * (1.0 + std::cos(M_PI * static_cast<double>(settled) / 480.0)) / 2.0;
    EXPECT_NEAR(r.lr(), expected, 1e-12) << r.ShortDebugString();
    EXPECT_GT(r.lr(), 0.0) << r.ShortDebugString();
    settled += r.samples();
  }
  EXPECT_EQ(settled, 480u);
}

// An evaluation off the step loop that the test holds: the first `held`
// calls block inside evaluate() until the test lets each go; each call
// returns the next accuracy of the list (the last one repeats).
class HeldEvaluator : public Evaluator {
 public:
  HeldEvaluator(std::vector<double> accuracies, int held)
      : accuracies_(std::move(accuracies)), held_(held) {}
  Evaluation evaluate(Model&) override {
    std::unique_lock lock(mutex_);
    const int call = calls_++;
    inside_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return call >= held_ || call < released_; });
    inside_ = false;
    const double a = accuracies_[std::min<size_t>(call, accuracies_.size() - 1)];
    return Evaluation{1.0 - a, a, 100};
  }
  void release_one() {
    std::lock_guard lock(mutex_);
    ++released_;
    changed_.notify_all();
  }
  // Lets every call go when it goes out of scope, so that a test that fails
  // with an evaluation held still ends.
  struct ReleaseAll {
    HeldEvaluator& held;
    ~ReleaseAll() {
      std::lock_guard lock(held.mutex_);
      held.released_ = 1 << 30;
      held.changed_.notify_all();
    }
  };
  // Waits (at most 30 s) until an evaluation is inside evaluate().
  bool wait_inside() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [&] { return inside_; });
  }
  bool inside() {
    std::lock_guard lock(mutex_);
    return inside_;
  }
  int calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  std::vector<double> accuracies_;
  int held_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int calls_ = 0, released_ = 0;
  bool inside_ = false;
};

// A log sink that raises a flag once a message containing `part` is logged
// (the captured log's text cannot be read while another thread logs).
class FlagSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FlagSink(std::string part) : part_(std::move(part)) {}
  std::atomic<bool> seen{false};

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (std::string_view(msg.payload.data(), msg.payload.size()).find(part_) !=
        std::string_view::npos)
      seen = true;
  }
  void flush_() override {}

 private:
  std::string part_;
};

TEST_F(CoordinatorTest, BackgroundEvaluationLetsStepsGoOnAndTheTargetCountsFromItsStep) {
  // The evaluation of step 4 is held until step 6 has closed: steps 5 and 6
  // run while it does. Its accuracy reaches the target: the run stops when
  // the result arrives (at the close of step 7), and the time to target is
  // step 4's wall time, not the result's.
  config.mutable_eval()->set_every_steps(4);
  config.mutable_stop()->set_max_steps(20);
  config.mutable_stop()->set_target_accuracy(0.9);
  HeldEvaluator held({0.95, 0.97}, 1);
  evaluator = &held;
  v1::RunConfig finalized = config;  // the model's shape as start() will make it
  finalize_run_config(finalized);
  EvaluationThread thread(held, testing::softmax_for(finalized));
  const HeldEvaluator::ReleaseAll unblock{held};  // first to go: the thread can then join
  evaluation_thread = &thread;
  std::map<uint64_t, bool> evaluating_at;  // steps done -> evaluation 4 running at its close
  uint64_t last_steps = 0;
  publish_metrics = [&](std::shared_ptr<const LiveSnapshot> s) {
    if (s->steps <= last_steps) return;
    last_steps = s->steps;
    now += 1.0;  // one second per step on the coordinator's clock
    if (s->steps == 4) {
      ASSERT_TRUE(held.wait_inside());
    }
    evaluating_at[s->steps] = held.inside();
    if (s->steps == 6) {
      held.release_one();
      evaluation_thread->wait_idle();
    }
  };
  start();
  join_all();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0);
  EXPECT_TRUE(evaluating_at[4] && evaluating_at[5] && evaluating_at[6])
      << "steps 5 and 6 closed while step 4 was evaluated";
  EXPECT_FALSE(evaluating_at[7]);
  const MetricsRecords m = metrics();
  ASSERT_EQ(m.steps.size(), 7u) << "stopped at the close of the step in flight";
  ASSERT_EQ(m.evals.size(), 2u);
  EXPECT_EQ(m.evals[0].step(), 4u);
  EXPECT_EQ(m.evals[0].eval_accuracy(), 0.95);
  EXPECT_EQ(m.evals[0].wall_seconds(), m.steps[3].wall_seconds()) << "its step's time";
  EXPECT_EQ(m.evals[0].finished_wall_seconds(), m.steps[6].wall_seconds());
  EXPECT_GT(m.steps[6].wall_seconds(), m.steps[3].wall_seconds());
  EXPECT_EQ(m.evals[1].step(), 7u) << "the final model, evaluated before the summary";
  for (const v1::StepRecord& r : m.steps) EXPECT_EQ(r.eval_seconds(), 0.0) << r.step();
  const v1::RunSummary summary = parse_summary(run_file("summary.json"), "summary.json");
  EXPECT_EQ(optional_number(summary.time_to_target_seconds()), m.steps[3].wall_seconds());
  EXPECT_EQ(optional_number(summary.target_step()), 4.0);
  EXPECT_EQ(optional_number(summary.final_eval_step()), 7.0);
  EXPECT_EQ(optional_number(summary.final_eval_accuracy()), 0.97);
  EXPECT_NE(summary.stop_reason().find("target accuracy"), std::string::npos);
  EXPECT_TRUE(log.contains("3 more steps done meanwhile")) << log.text.str();
  EXPECT_TRUE(log.contains("reached by the model after step 4")) << log.text.str();
}

TEST_F(CoordinatorTest, EvaluationStillRunningMakesTheNextOneWaitAndNoneIsSkipped) {
  // Evaluations every 2 steps; the first is held until the coordinator says
  // that the next one waits for it: then every evaluation asked for exists.
  config.mutable_eval()->set_every_steps(2);
  config.mutable_stop()->set_max_steps(6);
  HeldEvaluator held({0.5}, 1);
  evaluator = &held;
  v1::RunConfig finalized = config;  // the model's shape as start() will make it
  finalize_run_config(finalized);
  EvaluationThread thread(held, testing::softmax_for(finalized));
  const HeldEvaluator::ReleaseAll unblock{held};
  evaluation_thread = &thread;
  auto flag = std::make_shared<FlagSink>("waits for the one of step 2");
  log.logger->sinks().push_back(flag);
  start();
  std::jthread releaser([&] {
    for (int i = 0; i < 3000 && !flag->seen; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    held.release_one();  // also after a timeout, so a failure cannot hang
  });
  join_all();
  pump();
  releaser.join();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_TRUE(flag->seen) << log.text.str();
  std::vector<uint32_t> evaluated;
  for (const v1::EvalRecord& r : metrics().evals) evaluated.push_back(r.step());
  EXPECT_EQ(evaluated, (std::vector<uint32_t>{2, 4, 6}));
  EXPECT_EQ(held.calls(), 3);
  EXPECT_GE(coordinator->totals().evaluations_waited(), 1u);
  const v1::RunSummary summary = parse_summary(run_file("summary.json"), "summary.json");
  EXPECT_GE(summary.evaluations_waited(), 1u);
}

TEST_F(CoordinatorTest, LiveMetricsAgreeWithTheRecordsOfEachStep) {
  // Every snapshot, as published, against metrics.jsonl as it stands then.
  config.mutable_step()->set_tau(0.5);
  config.mutable_eval()->set_every_steps(2);
  SlowEvaluator slow(now, 0.0);
  evaluator = &slow;
  int checked = 0;
  std::shared_ptr<const LiveSnapshot> last;
  publish_metrics = [&](std::shared_ptr<const LiveSnapshot> s) {
    last = s;
    const MetricsRecords m = metrics();
    ASSERT_EQ(m.steps.size(), s->steps);
    uint64_t samples = 0, micro_batches = 0;
    std::map<std::string, uint64_t> steps_in;
    for (const v1::StepRecord& r : m.steps) {
      samples += r.samples();
      micro_batches += r.completed();
      for (const v1::WorkerStep& w : r.workers()) steps_in[w.name()] += w.contributed();
    }
    EXPECT_EQ(s->samples, samples);
    EXPECT_EQ(s->microbatches_completed, micro_batches);
    uint64_t histogram_micro_batches = 0;
    for (const WorkerLiveMetrics& w : s->workers) {
      EXPECT_EQ(w.step_compute.count, steps_in[w.name]) << w.name;
      histogram_micro_batches += w.micro_batch_compute.count;
    }
    EXPECT_EQ(histogram_micro_batches, micro_batches);
    if (!m.steps.empty()) {
      EXPECT_EQ(s->loss, m.steps.back().loss());
    }
    EXPECT_EQ(s->has_eval, !m.evals.empty());
    if (!m.evals.empty()) {
      EXPECT_EQ(s->eval_accuracy, m.evals.back().eval_accuracy());
      EXPECT_EQ(s->eval_step, m.evals.back().step());
    }
    ++checked;
  };
  start();
  join_all();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_GE(checked, 4);
  ASSERT_TRUE(last);
  EXPECT_TRUE(last->finished);
  EXPECT_EQ(last->steps, 4u);
  EXPECT_EQ(last->tau, 0.5);
  EXPECT_EQ(last->workers_alive, 3u);
  ASSERT_EQ(last->workers.size(), 3u);
  const std::string text = prometheus_text(*last);
  EXPECT_NE(text.find("# TYPE dctrain_steps_total counter\ndctrain_steps_total 4\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("dctrain_tau_seconds 0.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dctrain_eval_accuracy_ratio 0.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dctrain_worker_step_compute_seconds_bucket{worker=\"a\",rank=\"0\","
                      "le=\"+Inf\"} 4\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE dctrain_worker_micro_batch_compute_seconds histogram\n"),
            std::string::npos);
}

// The micro-batch that crosses tau: its whole injected delay by default, cut
// at tau with cap_at_tau (the DropCompute authors' form).
TEST(ComputeLoop, DelayCappedAtTauStopsAtTauOtherwiseRunsWhole) {
  for (const bool cap : {false, true}) {
    v1::RunConfig config = parse_run_config(kConfig, "unit");
    config.mutable_delay()->set_kind(v1::DELAY_CONSTANT);
    config.mutable_delay()->set_seconds(0.2);
    config.mutable_delay()->set_cap_at_tau(cap);
    finalize_run_config(config);
    const auto train = open_dataset(config, Split::kTrain, "");
    Replica replica(testing::softmax_for(config), config.optimizer());
    DelayModel delays(config.delay(), 0);
    SteadyClock clock;
    ComputeLoop loop(replica, *train, config.seed(), delays, clock);
    v1::Plan plan;
    plan.set_tau(0.02);
    for (uint64_t id = 1; id <= 3; ++id) {
      v1::MicroBatch& mb = *plan.add_micro_batches();
      mb.set_id(id);
      for (uint64_t k = 0; k < 4; ++k) mb.add_samples(4 * id + k);
    }
    const Message out = loop.run(plan, 0, "w", clock.now());
    const v1::Contribution& c = out.envelope.contribution();
    ASSERT_EQ(c.completed_size(), 1) << "cap " << cap;
    EXPECT_EQ(c.dropped_size(), 2) << "cap " << cap;
    const double t = c.completed(0).compute_seconds();
    if (cap) {
      EXPECT_GE(t, 0.02);
      EXPECT_LT(t, 0.1) << "the delay stops at tau";
      EXPECT_LT(c.completed(0).delay_seconds(), 0.02 + 1e-9);
    } else {
      EXPECT_GE(t, 0.2) << "the whole delay";
      EXPECT_EQ(c.completed(0).delay_seconds(), 0.2);
    }
  }
}

// A plan for the next step arrives while this one computes (the
// coordinator cut this worker as a backup, or stopped waiting for it): the
// running micro-batch finishes, no further one starts, and the rest are
// reported dropped; a plan that is still the latest runs whole.
TEST(ComputeLoop, StopsStartingMicroBatchesOnceAPlanForAnotherStepArrives) {
  v1::RunConfig config = parse_run_config(kConfig, "unit");
  config.mutable_delay()->set_kind(v1::DELAY_CONSTANT);
  config.mutable_delay()->set_seconds(1.0);
  finalize_run_config(config);
  const auto train = open_dataset(config, Split::kTrain, "");
  Replica replica(testing::softmax_for(config), config.optimizer());
  DelayModel delays(config.delay(), 0);
  // Each injected delay passes one second; the next step's plan is heard
  // during the second micro-batch's delay.
  struct PlanDuringDelay : testing::ManualClock {
    LatestPlan* latest = nullptr;
    int delays = 0;
    void sleep(double seconds) override {
      ManualClock::sleep(seconds);
      if (++delays == 2 && latest != nullptr) latest->heard(8);
    }
  } clock;
  LatestPlan latest;
  ComputeLoop loop(replica, *train, config.seed(), delays, clock, &latest);
  v1::Plan plan;
  plan.set_tau(std::numeric_limits<double>::infinity());
  for (uint64_t id = 1; id <= 5; ++id) {
    v1::MicroBatch& mb = *plan.add_micro_batches();
    mb.set_id(id);
    for (uint64_t k = 0; k < 4; ++k) mb.add_samples(4 * id + k);
  }

  EXPECT_FALSE(latest.closes(7)) << "no plan heard yet: nothing is closed";
  latest.heard(7);
  const Message whole = loop.run(plan, 7, "w", clock.now());
  EXPECT_EQ(whole.envelope.contribution().completed_size(), 5) << "no other plan: all run";

  clock.delays = 0;
  clock.latest = &latest;
  const Message cut = loop.run(plan, 7, "w", clock.now());
  const v1::Contribution& c = cut.envelope.contribution();
  ASSERT_EQ(c.completed_size(), 2) << "the running micro-batch finishes, no further one starts";
  EXPECT_EQ(c.completed(0).id(), 1u);
  EXPECT_EQ(c.completed(1).id(), 2u);
  ASSERT_EQ(c.dropped_size(), 3);
  EXPECT_EQ(c.dropped(0), 3u);
  EXPECT_EQ(c.dropped(2), 5u);
  EXPECT_NEAR(c.compute_seconds(), 2.0, 1e-9);

  // The next step's plan, now the latest, runs whole.
  const Message next = loop.run(plan, 8, "w", clock.now());
  EXPECT_EQ(next.envelope.contribution().completed_size(), 5);
}

}  // namespace
}  // namespace dctrain
