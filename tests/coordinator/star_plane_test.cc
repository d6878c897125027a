// The data plane "star" alone, against a fake host (plane_host_fake.h): the
// contributions are summed in rank order whatever order they arrive in, and
// the update that goes to every live worker is the one the coordinator's
// replica applies (its checksum is what apply() returns); the policy
// "backup" cuts the last worker once N - b contributed; a contribution that
// makes the sum unusable is refused by name, the others' work discarded,
// and nothing is applied.
#include "coordinator/planes/star_plane.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "comm/framing.h"
#include "common/random.h"
#include "tests/coordinator/plane_host_fake.h"

namespace dctrain {
namespace {

using testing::FakePlaneHost;

const char* kStar = R"(
name: "star-plane"
seed: 3
workers: 3
model { name: "mlp" image_channels: 1 image_height: 4 image_width: 4 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 24 micro_batch: 4 tau: inf }
data_plane { kind: "star" }
stop { max_steps: 4 }
guard { norm_multiple: 0 }
)";

// `rank`'s contribution to `plan`: `gradient` and `statistics` as its
// tensors, every planned sample computed.
Message contribution(const Message& plan, const std::vector<float>& gradient,
                     const std::vector<float>& statistics) {
  Message m;
  m.envelope = make_envelope(plan.envelope.step(), "worker");
  v1::Contribution& c = *m.envelope.mutable_contribution();
  uint64_t samples = 0;
  for (const v1::MicroBatch& mb : plan.envelope.plan().micro_batches()) {
    c.add_completed()->set_id(mb.id());
    samples += static_cast<uint64_t>(mb.samples_size());
  }
  c.set_samples(samples);
  c.set_loss_terms(samples);
  add_tensor(m, "gradient", gradient);
  add_tensor(m, "statistics", statistics);
  return m;
}

// Values of three magnitudes, so that the order of a float sum shows.
std::vector<float> values(size_t n, uint64_t seed, float scale) {
  Rng rng(seed);
  std::vector<float> out(n);
  for (float& v : out) v = scale * static_cast<float>(rng.normal());
  return out;
}

class StarPlaneTest : public ::testing::Test {
 protected:
  explicit StarPlaneTest(const char* config = kStar) : host(config), plane(host, host.rooms()) {}

  size_t parameters() const { return host.replica.parameter_count(); }
  size_t buffers() const { return host.replica.buffer_count(); }

  FakePlaneHost host;
  StarPlane plane;
};

TEST_F(StarPlaneTest, SumsInRankOrderWhateverTheArrivalAndAppliesWhatItSends) {
  host.divisor = 24.0;
  auto plans = host.plan_step(plane, {0, 1, 2}, 2, 4, std::numeric_limits<double>::infinity());
  const std::vector<float> scales = {1e4f, 1.0f, 1e-4f};
  std::vector<std::vector<float>> gradients, statistics;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    gradients.push_back(values(parameters(), 10 + rank, scales[rank]));
    statistics.push_back(values(buffers(), 20 + rank, 1.0f));
  }
  for (uint32_t rank : {2u, 0u, 1u}) {
    Message m = contribution(plans.at(rank), gradients[rank], statistics[rank]);
    ASSERT_FALSE(plane.contribution_problem(m).has_value());
    EXPECT_TRUE(plane.awaits(rank));
    plane.accept(rank, std::move(m), host.now);
    EXPECT_FALSE(plane.awaits(rank));
  }
  ASSERT_TRUE(plane.all_in());
  EXPECT_FALSE(plane.hold_open(host.now));
  const GuardedStep guarded = plane.settle();
  EXPECT_FALSE(guarded.discarded);

  // The sum in rank order, then divided, as float.
  std::vector<float> gradient(parameters(), 0.0f), stats(buffers(), 0.0f);
  for (uint32_t rank = 0; rank < 3; ++rank) {
    for (size_t i = 0; i < gradient.size(); ++i) gradient[i] += gradients[rank][i];
    for (size_t i = 0; i < stats.size(); ++i) stats[i] += statistics[rank][i];
  }
  for (float& g : gradient) g /= 24.0f;
  for (float& s : stats) s /= 24.0f;  // the step's samples: 3 workers x 2 x 4
  Replica reference(testing::softmax_for(host.config), host.config.optimizer());
  const uint64_t expected = reference.apply_update(gradient, stats, host.lr);

  ClosedStep closed = host.closed_step();
  ASSERT_EQ(closed.record.samples(), 24u);
  const std::optional<uint64_t> checksum = plane.apply(closed);
  ASSERT_TRUE(checksum.has_value());
  EXPECT_EQ(*checksum, expected);
  EXPECT_EQ(host.replica.parameter_checksum(), expected);
  for (uint32_t rank = 0; rank < 3; ++rank) {
    const std::string peer = "w" + std::to_string(rank);
    ASSERT_EQ(host.sent_to(peer).size(), 1u) << peer;
    const Message& update = host.sent_to(peer).front();
    EXPECT_TRUE(update.envelope.update().applied());
    std::vector<float> sent(parameters());
    copy_tensor(update, 0, sent);
    EXPECT_EQ(sent, gradient) << peer << " got other bits than the replica applied";
  }
  EXPECT_TRUE(host.removed.empty());
}

class BackupStarPlaneTest : public StarPlaneTest {
 protected:
  BackupStarPlaneTest() : StarPlaneTest(kBackup.c_str()) {}
  static inline const std::string kBackup = [] {
    std::string config = kStar;
    config.replace(config.find("tau: inf }"), 10,
                   "tau: inf policy: \"backup\" backup_workers: 1 }");
    return config;
  }();
};

TEST_F(BackupStarPlaneTest, CutsTheLastWorkerOnceAllButTheBackupsContributed) {
  auto plans = host.plan_step(plane, {0, 1, 2}, 1, 4, std::numeric_limits<double>::infinity());
  const std::vector<float> gradient(parameters(), 0.5f), statistics(buffers(), 1.0f);
  plane.accept(2, contribution(plans.at(2), gradient, statistics), host.now);
  EXPECT_TRUE(host.removed.empty());
  EXPECT_FALSE(plane.all_in());
  plane.accept(0, contribution(plans.at(0), gradient, statistics), host.now);
  ASSERT_EQ(host.removed.size(), 1u);
  ASSERT_TRUE(host.removed.contains(1));
  EXPECT_EQ(host.removed.at(1).first, Removal::kCut);
  EXPECT_NE(host.removed.at(1).second.find("2 of 3 contributed"), std::string::npos)
      << host.removed.at(1).second;
  EXPECT_FALSE(plane.awaits(1));
  EXPECT_TRUE(plane.all_in());
}

TEST_F(StarPlaneTest, AContributionThatMakesTheSumUnusableIsNamedAndNothingIsApplied) {
  auto plans = host.plan_step(plane, {0, 1, 2}, 1, 4, std::numeric_limits<double>::infinity());
  const uint64_t before = host.replica.parameter_checksum();
  std::vector<float> gradient(parameters(), 0.25f), bad = gradient;
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> statistics(buffers(), 1.0f);
  for (uint32_t rank = 0; rank < 3; ++rank) {
    plane.accept(rank, contribution(plans.at(rank), rank == 1 ? bad : gradient, statistics),
                 host.now);
  }
  const GuardedStep guarded = plane.settle();
  EXPECT_TRUE(guarded.discarded);
  ASSERT_EQ(host.removed.size(), 3u);
  EXPECT_EQ(host.removed.at(1).first, Removal::kRefusedUpdate);
  EXPECT_EQ(host.removed.at(0).first, Removal::kDiscarded);
  EXPECT_EQ(host.removed.at(2).first, Removal::kDiscarded);
  EXPECT_EQ(host.totals.steps_discarded(), 1u);

  ClosedStep closed = host.closed_step();
  EXPECT_FALSE(closed.record.applied());
  EXPECT_EQ(plane.apply(closed), before);
  EXPECT_EQ(host.replica.parameter_checksum(), before);
  EXPECT_FALSE(host.sent_to("w0").front().envelope.update().applied());
}

}  // namespace
}  // namespace dctrain
