// The coordinator's guard in one process with a fake clock: a step whose
// reduced update would not be finite is discarded (its micro-batches
// requeued, the run going on from the parameters it had, the contributions
// that caused it named); bad steps in a row stop the run with an error; the
// optional norm guard refuses a contribution far beyond the step's others.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "coordinator/coordinator.h"
#include "coordinator/step/peer_limits.h"
#include "coordinator/step/update_guard.h"
#include "metrics/metrics_json.h"
#include "tests/coordinator/coordinator_fixture.h"
#include "tests/testing/fake_cluster.h"

namespace dctrain {
namespace testing {

// Lines of `text` holding `part`.
inline size_t count_lines(const std::string& text, const std::string& part) {
  size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.find(part) != std::string::npos;
  return n;
}

inline std::string read_file_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace testing
namespace {

using testing::as_received;
using testing::CapturedLog;
using testing::FakeWorker;
using testing::RecordingOutbox;

const char* kConfig = R"(
name: "guard"
seed: 5
workers: 3
model { name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 24 micro_batch: 4 tau: inf }
liveness { heartbeat_seconds: 0.5 silence_seconds: 10 grace_seconds: 0.5 join_timeout_seconds: 120 }
stop { max_steps: 4 }
guard { norm_multiple: 0 }  # the update guard alone; the norm guard's tests set it
)";

// Overwrites every gradient value of a contribution with f(value).
void rewrite_gradient(Message& contribution, const std::function<float(float)>& rewrite) {
  const uint64_t count = contribution.envelope.tensors(0).count();
  std::vector<float> g(count);
  copy_tensor(contribution, 0, g);
  for (float& v : g) v = rewrite(v);
  Message out;
  out.envelope = contribution.envelope;
  out.envelope.clear_tensors();
  add_tensor(out, "gradient", g);
  for (int i = 1; i < contribution.envelope.tensors_size(); ++i) {
    *out.envelope.add_tensors() = contribution.envelope.tensors(i);
    const size_t first = first_frame_of(contribution.envelope, static_cast<size_t>(i));
    for (size_t k = 0; k < frames_for(contribution.envelope.tensors(i).count()); ++k) {
      const zmq::message_t& f = contribution.frames[first + k];
      out.frames.emplace_back(f.data(), f.size());
    }
  }
  contribution = std::move(out);
}

class GuardTest : public testing::CoordinatorFixture {
 public:
  GuardTest() : CoordinatorFixture(kConfig, "guard") { hello_on_start = true; }

  // One step in which b sends 1000 times its gradient (plus 1).
  void run_one_step_with_b_inflated() {
    config.mutable_stop()->set_max_steps(1);
    start();
    tamper = [&](const std::string& name, uint64_t, Message& c) {
      if (name == "b") rewrite_gradient(c, [](float v) { return 1000.0f * v + 1.0f; });
    };
    pump();
  }

  // Delivers welcomes and every plan but `held`'s, and the answers; no
  // contribution is tampered with.
  void pump_except_plans_for(const std::string& held) {
    auto saved = std::move(tamper);
    tamper = nullptr;
    bool moved = true;
    while (moved) {
      moved = false;
      for (auto& [name, worker] : workers) {
        auto& queue = outbox.inbox[name];
        while (!queue.empty() && (name != held || queue.front().envelope.has_welcome())) {
          Message m = roundtrip(std::move(queue.front()));
          queue.pop_front();
          moved = true;
          deliver(name, worker, std::move(m));
        }
      }
    }
    tamper = std::move(saved);
  }
};

// The parameters a clean run of `steps` steps ends with.
std::vector<float> clean_run_parameters(uint64_t steps) {
  struct Clean : GuardTest {
    void TestBody() override {}
  } clean;
  clean.SetUp();
  clean.run_dir += "-clean";
  std::filesystem::create_directories(clean.run_dir);
  clean.config.mutable_stop()->set_max_steps(steps);
  clean.start();
  clean.pump();
  EXPECT_TRUE(clean.coordinator->finished());
  const std::span<const float> p = clean.replica->model().parameters().flat();
  std::vector<float> out(p.begin(), p.end());
  clean.coordinator.reset();
  std::filesystem::remove_all(clean.run_dir);  // its own, beside the fixture's scratch folder
  clean.TearDown();
  return out;
}

TEST_F(GuardTest, PoisonedContributionDiscardsTheStepAndTheRunEndsAsIfItNeverCame) {
  // b's step-1 contribution holds 1e30: finite, so validation takes it, but
  // its square overflows float32.
  config.mutable_stop()->set_max_steps(5);
  start();
  uint64_t checksum_before = 0;
  tamper = [&](const std::string& name, uint64_t step, Message& c) {
    if (step == 1 && name == "b") {
      checksum_before = replica->parameter_checksum();
      rewrite_gradient(c, [](float) { return 1e30f; });
    }
  };
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0) << coordinator->stop_reason();
  const v1::RunTotals& t = coordinator->totals();
  EXPECT_EQ(t.steps(), 5u);
  EXPECT_EQ(t.steps_discarded(), 1u);
  EXPECT_EQ(t.samples_lost(), 0u);
  EXPECT_EQ(t.samples_completed(), 4u * 24u) << "the discarded step completed nothing";
  EXPECT_TRUE(
      log.contains("step 1 discarded: the reduced gradient holds NaN, infinite or "
                   "overflowing values"))
      << log.text.str();
  EXPECT_TRUE(log.contains("caused by worker 'b' (rank 1)")) << log.text.str();
  const auto records = metrics();
  ASSERT_EQ(records.steps.size(), 5u);
  const v1::StepRecord& step1 = records.steps[1];
  EXPECT_TRUE(step1.discarded());
  EXPECT_FALSE(step1.applied());
  EXPECT_EQ(step1.orphaned(), 6u) << "all six micro-batches requeued";
  for (const v1::WorkerStep& w : step1.workers()) {
    EXPECT_EQ(w.refused(), w.name() == "b" ? "update" : "discarded") << w.name();
  }
  EXPECT_NE(checksum_before, 0u);
  // Nothing of step 1 was applied anywhere, and its micro-batches were
  // planned again at the head of the queue: the run ends where a clean run
  // one step shorter does, but for the order of the sums (the planner deals
  // each step from another rank, so the same micro-batches land on other
  // workers).
  const std::vector<float> clean = clean_run_parameters(4);
  const std::span<const float> mine = replica->model().parameters().flat();
  ASSERT_EQ(clean.size(), mine.size());
  double worst = 0.0;
  for (size_t i = 0; i < clean.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(clean[i]) - mine[i]) /
                                (1.0 + std::abs(static_cast<double>(clean[i]))));
  }
  EXPECT_LT(worst, 1e-5) << "the parameters differ from the clean run's";
  expect_replicas_identical();
}

TEST_F(GuardTest, TheContributionThatMakesTheRunningSumOverflowIsNamed) {
  // a and b each hold 1e19 (below 2^64, so neither overflows alone); their
  // sum, the tree's node (a + b) (then + c), overflows when b's is added.
  config.mutable_stop()->set_max_steps(2);
  start();
  tamper = [&](const std::string& name, uint64_t step, Message& c) {
    if (step == 0 && name != "c") rewrite_gradient(c, [](float) { return 1e19f; });
  };
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0);
  EXPECT_EQ(coordinator->totals().steps_discarded(), 1u);
  EXPECT_TRUE(log.contains("caused by worker 'b' (rank 1);")) << log.text.str();
  const v1::StepRecord step0 = metrics().steps.at(0);
  for (const v1::WorkerStep& w : step0.workers()) {
    EXPECT_EQ(w.refused(), w.name() == "b" ? "update" : "discarded") << w.name();
  }
}

TEST_F(GuardTest, ADiscardedContributionIsNotAMissedStep) {
  // Released after one missed step: the contributors of a discarded step
  // computed their plans and missed nothing, so nobody is released. (Before,
  // each of them counted a missed deadline and all three were released.)
  config.mutable_liveness()->set_release_after_missed_steps(1);
  config.mutable_stop()->set_max_steps(4);
  start();
  tamper = [&](const std::string& name, uint64_t step, Message& c) {
    if (step == 1 && name == "c") rewrite_gradient(c, [](float) { return 1e30f; });
  };
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0);
  const v1::RunTotals& t = coordinator->totals();
  EXPECT_EQ(t.steps_discarded(), 1u);
  EXPECT_EQ(t.workers_released(), 0u) << log.text.str();
  EXPECT_EQ(t.steps(), 4u);
  const auto records = metrics();
  ASSERT_EQ(records.steps.size(), 4u);
  EXPECT_EQ(records.steps[1].workers(0).refused(), "discarded");
  EXPECT_EQ(records.steps[1].workers(2).refused(), "update");
  for (const v1::WorkerStep& w : records.steps[3].workers()) {
    EXPECT_TRUE(w.contributed()) << w.name() << " is still in the run";
  }
}

TEST_F(GuardTest, BadStepsInARowStopTheRunWithAnError) {
  config.mutable_stop()->set_max_steps(20);
  start();
  tamper = [&](const std::string& name, uint64_t, Message& c) {
    if (name == "c") rewrite_gradient(c, [](float) { return -3e38f; });
  };
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 1);
  EXPECT_NE(coordinator->stop_reason().find("3 steps in a row had no usable update"),
            std::string::npos)
      << coordinator->stop_reason();
  EXPECT_EQ(coordinator->totals().steps_discarded(), 3u);
  EXPECT_EQ(coordinator->totals().samples_completed(), 0u);
  EXPECT_TRUE(std::filesystem::exists(run_dir / "summary.json"));
}

TEST_F(GuardTest, NormGuardRefusesAContributionFarBeyondTheOthersAndRequeuesIt) {
  config.mutable_guard()->set_norm_multiple(10.0);
  config.mutable_stop()->set_max_steps(3);
  // A refused contribution is not a missed step: b is not released.
  config.mutable_liveness()->set_release_after_missed_steps(1);
  start();
  std::vector<float> a0, c0;
  std::vector<float> update0;
  tamper = [&](const std::string& name, uint64_t step, Message& c) {
    if (step != 0) return;
    if (name == "b") rewrite_gradient(c, [](float v) { return 1000.0f * v + 1.0f; });
    std::vector<float>& keep = name == "a" ? a0 : c0;
    if (name != "b") {
      keep.resize(c.envelope.tensors(0).count());
      copy_tensor(c, 0, keep);
    }
  };
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0);
  const v1::RunTotals& t = coordinator->totals();
  EXPECT_EQ(t.contributions_refused_norm(), 1u);
  EXPECT_EQ(t.steps_discarded(), 0u);
  EXPECT_EQ(t.samples_lost(), 0u);
  EXPECT_EQ(t.workers_released(), 0u) << log.text.str();
  EXPECT_TRUE(
      log.contains("refused worker 'b' (rank 1)'s contribution for step 0: its per-sample gradient "
                   "norm"))
      << log.text.str();
  const auto records = metrics();
  const v1::StepRecord& step0 = records.steps.at(0);
  EXPECT_EQ(step0.refused_norm(), 1u);
  EXPECT_TRUE(step0.applied()) << "a's and c's contributions were applied";
  EXPECT_EQ(step0.samples(), 16u);
  EXPECT_EQ(step0.orphaned(), 2u) << "b's two micro-batches requeued";
  for (const v1::WorkerStep& w : step0.workers()) {
    EXPECT_EQ(w.refused(), w.name() == "b" ? "norm" : "") << w.name();
  }
  expect_replicas_identical();
}

TEST_F(GuardTest, NormGuardIsOnByDefault) {
  config.mutable_guard()->clear_norm_multiple();
  run_one_step_with_b_inflated();
  ASSERT_TRUE(coordinator->finished());
  EXPECT_EQ(coordinator->totals().contributions_refused_norm(), 1u);
  EXPECT_EQ(metrics().steps.at(0).samples(), 16u);
}

TEST_F(GuardTest, NormGuardAtZeroIsOff) {
  run_one_step_with_b_inflated();  // kConfig sets norm_multiple 0
  ASSERT_TRUE(coordinator->finished());
  EXPECT_EQ(coordinator->totals().contributions_refused_norm(), 0u);
  EXPECT_EQ(metrics().steps.at(0).samples(), 24u);
}

TEST_F(GuardTest, AMemberSendingThreeTimesItsGradientFlippedIsRefusedAndNoHonestOneIs) {
  // Four workers, each with its real replica; d sends -3 times the gradient
  // it computed, every step, under the default guard. From its 16th step on
  // its record shows it, and its contributions are refused; a, b and c are
  // never refused.
  config.mutable_guard()->clear_norm_multiple();
  config.set_workers(4);
  config.mutable_step()->set_global_batch(32);
  config.mutable_dataset()->set_train_limit(600);
  config.mutable_stop()->set_max_steps(60);
  order.push_back("d");
  start();
  std::map<std::string, std::set<uint64_t>> refused;
  tamper = [&](const std::string& name, uint64_t, Message& c) {
    if (name == "d") rewrite_gradient(c, [](float v) { return -3.0f * v; });
  };
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0);
  for (const v1::StepRecord& step : metrics().steps) {
    for (const v1::WorkerStep& w : step.workers()) {
      if (w.refused() == "norm") refused[w.name()].insert(step.step());
    }
  }
  EXPECT_EQ(refused.size(), 1u) << "only d";
  ASSERT_TRUE(refused.contains("d")) << log.text.str();
  size_t late = 0;
  for (uint64_t s : refused.at("d")) late += s >= ContributionRecord::kLeastSteps ? 1 : 0;
  EXPECT_GE(late, 40u) << "refused at " << refused.at("d").size() << " steps";
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
  EXPECT_TRUE(log.contains("a flipped gradient") || log.contains("a scaled gradient"))
      << log.text.str();
}

TEST_F(GuardTest, BadMessagesAreCountedAndTheirLogLinesBounded) {
  config.mutable_stop()->set_max_steps(1);
  start();
  // 1000 garbage messages from one peer, then one from each of 3000 others.
  auto garbage = [] {
    std::vector<zmq::message_t> parts;
    parts.emplace_back(std::string("\xde\xad\xbe\xef garbage"));
    return parts;
  };
  for (int i = 0; i < 1000; ++i) {
    now += 0.001;
    coordinator->handle(Received{"noisy", garbage()}, now);
  }
  for (int i = 0; i < 3000; ++i) {
    coordinator->handle(Received{fmt::format("fresh-{}", i), garbage()}, now);
  }
  pump();
  ASSERT_TRUE(coordinator->finished()) << "training went on";
  EXPECT_EQ(coordinator->totals().bad_messages(), 4000u);
  const std::string text = log.text.str();
  const size_t noisy = testing::count_lines(text, "peer 'noisy'");
  // The first five one by one, a note that the lines now thin out, and one
  // line per 10 s of the fake clock's 1 s.
  EXPECT_LE(noisy, 6u + 1u) << text;
  EXPECT_GE(noisy, 5u);
  // Fresh peers: each logs its first (the table is bounded; beyond it they
  // share one entry, which also thins out).
  EXPECT_LE(testing::count_lines(text, "dropped a message from peer"),
            6u + PeerLog::kMaxPeers + 6u);
  const auto summary =
      parse_summary(testing::read_file_text(run_dir / "summary.json"), "summary.json");
  EXPECT_EQ(summary.bad_messages(), 4000u);
}

TEST_F(GuardTest, RefusedHellosAreAnsweredForABoundedNumberOfPeers) {
  config.mutable_guard()->set_max_refused_peers(16);
  start();
  // The run is full (a, b, c); 500 peers say hello, some twice.
  for (int i = 0; i < 500; ++i) {
    for (int twice = 0; twice < 2; ++twice) {
      const std::string name = fmt::format("x{}", i);
      Message hello;
      hello.envelope = make_envelope(0, name);
      hello.envelope.mutable_hello()->set_worker_name(name);
      coordinator->handle(as_received(name, std::move(hello)), now);
    }
  }
  size_t answered = 0;
  for (const auto& [peer, queue] : outbox.inbox) {
    if (peer.starts_with("x")) answered += queue.size();
  }
  EXPECT_EQ(answered, 16u)
      << "one refusal each for the first 16 peers, nothing queued for the rest";
  EXPECT_EQ(testing::count_lines(log.text.str(), "refused worker 'x"), 16u);
  // A period later, new peers are answered again.
  now += 11.0;
  Message hello;
  hello.envelope = make_envelope(0, "late");
  hello.envelope.mutable_hello()->set_worker_name("late");
  coordinator->handle(as_received("late", std::move(hello)), now);
  ASSERT_EQ(outbox.inbox["late"].size(), 1u);
  EXPECT_EQ(outbox.inbox["late"].front().envelope.body_case(), v1::Envelope::kRefusal);
  EXPECT_TRUE(log.contains("984 hellos refused without an answer")) << log.text.str();
  pump();
  EXPECT_TRUE(coordinator->finished()) << "training went on";
}

TEST_F(GuardTest, WorkerWhoseConnectionClosesIsDeadAtOnceAndItsSlotFree) {
  config.mutable_stop()->set_max_steps(5);
  start();
  // Step 0 is open; c's connection closes before it contributes.
  pump_except_plans_for("c");
  coordinator->on_disconnected("c", now);
  EXPECT_TRUE(log.contains("worker 'c' (rank 2): its connection closed; declared dead now"))
      << log.text.str();
  EXPECT_TRUE(
      log.contains("worker 'c' (rank 2) is out of step 0 because it died (its "
                   "connection closed)"))
      << log.text.str();
  EXPECT_EQ(coordinator->step(), 1u) << "step 0 closed with a and b at once";
  EXPECT_EQ(coordinator->totals().workers_disconnected(), 1u);
  // A replacement takes the free slot and joins the next step.
  outbox.inbox["c"].clear();
  workers.erase("c");
  workers.emplace("d", FakeWorker("d", *train));
  coordinator->handle(as_received("d", workers.at("d").hello()), now);
  ASSERT_FALSE(log.contains("refused worker 'd'")) << log.text.str();
  pump();
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->totals().samples_lost(), 0u);
  const auto records = metrics();
  bool d_contributed = false;
  for (const v1::WorkerStep& w : records.steps.back().workers()) {
    d_contributed |= w.name() == "d" && w.contributed();
  }
  EXPECT_TRUE(d_contributed);
}

TEST(UpdateGuard, UsableMeansFiniteWithASquareThatFitsAFloat) {
  std::vector<float> v = {1.0f, -2.0f, 1e19f};
  EXPECT_TRUE(usable(v));
  v[2] = -kOverflowMagnitude;
  EXPECT_FALSE(usable(v));
  v[2] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(usable(v));
  v[2] = std::nanf("");
  EXPECT_FALSE(usable(v));
  // Long enough for every vector width, one value at each place that a
  // vector loop treats differently (first lane, lane ends, the tail).
  const float below = std::nextafter(kOverflowMagnitude, 0.0f);
  std::vector<float> long_one(1000 + 13, -0.0f);
  long_one[1] = 1e-45f;  // subnormal
  long_one[2] = -below;
  EXPECT_TRUE(usable(long_one));
  for (const size_t at :
       {size_t{0}, size_t{15}, size_t{16}, size_t{17}, size_t{999}, long_one.size() - 1}) {
    for (const float bad :
         {kOverflowMagnitude, -kOverflowMagnitude, std::numeric_limits<float>::max(),
          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
          std::nanf(""), -std::nanf("")}) {
      std::vector<float> w = long_one;
      w[at] = bad;
      EXPECT_FALSE(usable(w)) << bad << " at " << at;
    }
  }
  EXPECT_TRUE(usable(std::span<const float>()));
}

}  // namespace
}  // namespace dctrain
