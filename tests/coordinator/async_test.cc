// Policy "async" in the coordinator, in one process on simulated time: a
// plan delivered to a worker at time t lands as its contribution at
// t + that worker's seconds per plan, so a straggler is as slow as the test
// says whatever the machine does. The staleness bound is checked on the
// records the run writes, and the bound's rule alone in AsyncFlights.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/step/async_flights.h"
#include "tests/coordinator/coordinator_fixture.h"

namespace dctrain {
namespace {

using testing::as_received;

const char* kConfig = R"(
name: "async"
seed: 5
workers: 3
model { name: "mlp" image_channels: 1 image_height: 8 image_width: 8 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.05 }
step { global_batch: 24 micro_batch: 4 policy: "async" }
liveness { heartbeat_seconds: 0.5 silence_seconds: 1000 grace_seconds: 0.5 join_timeout_seconds: 120 }
stop { max_steps: 90 }
)";

class AsyncTest : public testing::CoordinatorFixture {
 protected:
  AsyncTest() : CoordinatorFixture(kConfig, "async") { hello_on_start = true; }

  // Runs until nothing moves: every message to a worker is delivered at
  // once, except that a plan's contribution reaches the coordinator
  // seconds.at(worker) later on the fake clock; the plans of the workers
  // in `stuck` never land.
  void run_timed(const std::map<std::string, double>& seconds,
                 const std::set<std::string>& stuck = {}) {
    // (arrival, order sent) -> (worker, contribution)
    std::map<std::pair<double, uint64_t>, std::pair<std::string, Message>> landings;
    uint64_t sent = 0;
    for (;;) {
      bool moved = false;
      for (const std::string& name : delivery_order()) {
        auto& queue = outbox.inbox[name];
        while (!queue.empty()) {
          Message m = roundtrip(std::move(queue.front()));
          queue.pop_front();
          moved = true;
          if (m.envelope.has_plan() && stuck.contains(name)) continue;
          if (m.envelope.has_plan()) {
            landings.emplace(std::make_pair(now + seconds.at(name), sent++),
                             std::make_pair(name, workers.at(name).on_plan(m)));
          } else {
            deliver(name, workers.at(name), std::move(m));
          }
        }
      }
      if (moved) continue;
      if (landings.empty()) return;
      auto first = landings.extract(landings.begin());
      now = first.key().first;
      coordinator->handle(as_received(first.mapped().first, std::move(first.mapped().second)), now);
      coordinator->tick(now);
    }
  }
};

TEST_F(AsyncTest, StalenessNeverPassesItsBoundUnderAThreeTimesSlowerWorker) {
  // With 3 workers a bound of 2 or less keeps them in step (any other plan
  // could land before the slow one's); 4 lets the fast ones run ahead.
  config.mutable_step()->set_max_staleness(4);
  start();
  run_timed({{"a", 1.0}, {"b", 1.0}, {"c", 3.0}});
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  EXPECT_EQ(coordinator->exit_code(), 0) << coordinator->stop_reason();

  const MetricsRecords records = metrics();
  ASSERT_EQ(records.steps.size(), 90u);
  std::map<std::string, int> updates;
  uint32_t max_staleness = 0;
  for (const v1::StepRecord& r : records.steps) {
    ASSERT_EQ(r.workers_size(), 1) << "each update is one contribution";
    EXPECT_LE(r.staleness(), 4u) << r.ShortDebugString();
    EXPECT_EQ(r.policy(), "async");
    max_staleness = std::max(max_staleness, r.staleness());
    ++updates[r.workers(0).name()];
  }
  EXPECT_EQ(max_staleness, 4u) << "the bound is what holds the fast workers back";
  // The fast workers land more often than the slow one (twice as often
  // here: the bound holds them back from three times), which lands too.
  EXPECT_GT(updates["c"], 0);
  EXPECT_GT(updates["a"], updates["c"]);
  EXPECT_GT(updates["b"], updates["c"]);
  // Every sample once: 90 updates of 8 samples are 3 epochs of 240.
  ASSERT_EQ(records.epochs.size(), 3u);
  for (const v1::EpochRecord& e : records.epochs) {
    EXPECT_TRUE(e.audit_ok()) << e.ShortDebugString();
    EXPECT_EQ(e.done(), 240u);
  }
}

TEST_F(AsyncTest, ABoundOfZeroRunsOnePlanAtATime) {
  config.mutable_step()->set_max_staleness(0);
  config.mutable_stop()->set_max_steps(12);
  start();
  run_timed({{"a", 1.0}, {"b", 2.0}, {"c", 3.0}});
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  for (const v1::StepRecord& r : metrics().steps) EXPECT_EQ(r.staleness(), 0u);
}

TEST_F(AsyncTest, AWorkerThatDiesInFlightHasItsSamplesRequeuedAndTheOthersGoOn) {
  config.mutable_step()->set_max_staleness(4);
  config.mutable_stop()->set_max_steps(60);
  start();
  // c's first plan never lands: the bound holds a and b back until c's
  // connection closes.
  run_timed({{"a", 1.0}, {"b", 1.0}, {"c", 1.0}}, {"c"});
  ASSERT_FALSE(coordinator->finished());
  EXPECT_LE(metrics().steps.size(), 4u);
  coordinator->on_disconnected("c", now);
  workers.erase("c");
  order = {"a", "b"};
  run_timed({{"a", 1.0}, {"b", 1.0}});
  ASSERT_TRUE(coordinator->finished()) << log.text.str();
  const MetricsRecords records = metrics();
  ASSERT_FALSE(records.epochs.empty());
  for (const v1::EpochRecord& e : records.epochs) EXPECT_TRUE(e.audit_ok()) << e.ShortDebugString();
  EXPECT_NE(log.text.str().find("rank 2)'s plan of update 0 is lost"), std::string::npos)
      << log.text.str();
}

// The rule alone: random landings of workers at random speeds, one of them
// three times slower, plans sent whenever admitted. No update is ever more
// than S old.
TEST(AsyncFlights, NoLandingIsEverStalerThanTheBound) {
  for (uint32_t bound : {0u, 1u, 2u, 4u, 8u}) {
    std::mt19937_64 random(bound + 1);
    AsyncFlights flights(bound);
    const uint32_t workers = 6;
    std::vector<double> speed(workers, 1.0);
    speed[0] = 3.0;
    std::map<double, uint32_t> landing;  // time -> rank
    std::vector<bool> idle(workers, true);
    uint64_t version = 0;
    double now = 0.0;
    uint32_t worst = 0;
    for (int event = 0; event < 3000; ++event) {
      for (uint32_t r = 0; r < workers; ++r) {
        if (!idle[r] || !flights.admits(version)) continue;
        flights.send(r, Flight{{}, version, 0, now, 1e300});
        std::uniform_real_distribution<double> jitter(0.8, 1.2);
        landing[now + speed[r] * jitter(random)] = r;
        idle[r] = false;
      }
      ASSERT_FALSE(landing.empty());
      const auto [at, r] = *landing.begin();
      landing.erase(landing.begin());
      now = at;
      const std::optional<Flight> f = flights.end(r);
      ASSERT_TRUE(f.has_value());
      const uint64_t staleness = version - f->version;
      ASSERT_LE(staleness, bound) << "bound " << bound << " event " << event;
      worst = std::max(worst, static_cast<uint32_t>(staleness));
      ++version;
      idle[r] = true;
    }
    // The slow worker's landings reach the bound: it is what holds the
    // others back.
    EXPECT_EQ(worst, bound);
  }
}

}  // namespace
}  // namespace dctrain
