// The data plane "exchange" alone, against a fake host (plane_host_fake.h),
// with the members' reports written by hand (tests/testing/
// exchange_script.h): no socket, no worker. A round whose members all
// report ok is committed on the reports alone, and the sum its lowest
// member forwards is applied to the coordinator's replica only after, as
// every member applies it; a member that dies while the others wait in the
// round has the round redone at once among the rest, and a report of the
// old round is then out of round; a forwarded sum that is not the one the
// members hold is refused, and the next member is asked for it.
#include "coordinator/planes/exchange_plane.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "comm/framing.h"
#include "common/random.h"
#include "exchange/chunk.h"
#include "tests/coordinator/plane_host_fake.h"
#include "tests/testing/exchange_script.h"

namespace dctrain {
namespace {

using testing::FakePlaneHost;

const char* kExchange = R"(
name: "exchange-plane"
seed: 4
workers: 3
model { name: "mlp" image_channels: 1 image_height: 4 image_width: 4 }
dataset { kind: "synthetic" synthetic_samples: 600 train_limit: 240 }
optimizer { kind: "sgd" lr: 0.1 momentum: 0.9 }
step { global_batch: 24 micro_batch: 4 tau: inf }
data_plane { kind: "exchange" timeout_seconds: 2 }
liveness { heartbeat_seconds: 0.5 silence_seconds: 10 grace_seconds: 0.5 join_timeout_seconds: 120 }
stop { max_steps: 4 }
guard { norm_multiple: 0 }  # rounds scripted without sketches
)";

constexpr double kInf = std::numeric_limits<double>::infinity();

class ExchangePlaneTest : public ::testing::Test {
 protected:
  ExchangePlaneTest() : host(kExchange), plane(host, host.rooms(), 1'000'000, [] { return 7u; }) {
    for (uint32_t rank = 0; rank < 3; ++rank) {
      v1::Hello hello;
      hello.set_exchange_endpoint("tcp://127.0.0.1:" + std::to_string(7000 + rank));
      hello.set_exchange_token(std::string(kExchangeTokenBytes, static_cast<char>('a' + rank)));
      EXPECT_FALSE(plane.hello_problem(hello).has_value());
      plane.joined(rank, hello);
    }
    Rng rng(11);
    sum.resize(host.replica.parameter_count() + host.replica.buffer_count());
    for (float& v : sum) v = static_cast<float>(rng.normal());
  }

  std::string name(uint32_t rank) const { return "w" + std::to_string(rank); }

  // `rank`'s report of its round, ok, holding `sum`; the lowest member says
  // its sum follows.
  Message report(uint32_t rank, const Message& plan, bool lowest) const {
    return testing::round_report(name(rank), plan, lowest, sum, host.start_checksum());
  }

  void deliver(uint32_t rank, Message message) {
    ASSERT_FALSE(plane.out_of_round(message.envelope.contribution()).has_value());
    ASSERT_FALSE(plane.contribution_problem(message).has_value());
    plane.accept(rank, std::move(message), host.now);
  }

  FakePlaneHost host;
  ExchangePlane plane;
  std::vector<float> sum;  // [gradient | statistics], as every member holds it
};

TEST_F(ExchangePlaneTest, ARoundIsCommittedOnItsReportsAndItsSumAppliedAfter) {
  host.divisor = 24.0;
  auto plans = host.plan_step(plane, {0, 1, 2}, 2, 4, kInf);
  const v1::ExchangePlan& x = plans.at(1).envelope.plan().exchange();
  ASSERT_EQ(x.member_ranks_size(), 3);
  EXPECT_EQ(x.member_endpoints(2), "tcp://127.0.0.1:7002");
  EXPECT_EQ(x.attempt(), 0u);

  const uint64_t before = host.replica.parameter_checksum();
  for (uint32_t rank : {2u, 1u, 0u}) deliver(rank, report(rank, plans.at(rank), rank == 0));
  ASSERT_TRUE(plane.all_in());
  // The commit goes out on the reports, ahead of the sum.
  EXPECT_TRUE(plane.hold_open(host.now));
  for (uint32_t rank = 0; rank < 3; ++rank) {
    ASSERT_EQ(host.sent_to(name(rank)).size(), 1u);
    const v1::Update& commit = host.sent_to(name(rank)).front().envelope.update();
    EXPECT_TRUE(commit.commit());
    EXPECT_TRUE(commit.applied());
    EXPECT_EQ(commit.gradient_divisor(), 24.0);
    EXPECT_EQ(commit.samples(), 24u);
  }
  EXPECT_TRUE(plane.workers_ahead());

  const size_t parameters = host.replica.parameter_count();
  plane.on_sum(0, testing::round_sum(name(0), host.step(), 0, sum, parameters), host.now);
  EXPECT_FALSE(plane.hold_open(host.now));
  EXPECT_FALSE(plane.settle().discarded);
  ClosedStep closed = host.closed_step();
  EXPECT_FALSE(plane.apply(closed).has_value()) << "applied before the next plans";
  EXPECT_EQ(host.replica.parameter_checksum(), before);
  for (uint32_t rank = 0; rank < 3; ++rank) EXPECT_EQ(host.sent_to(name(rank)).size(), 1u);

  // As every member applies it: the gradient divided inside the optimizer's
  // pass, the statistics by the step's samples.
  std::vector<float> gradient(sum.begin(), sum.begin() + static_cast<ptrdiff_t>(parameters));
  std::vector<float> statistics(sum.begin() + static_cast<ptrdiff_t>(parameters), sum.end());
  for (float& s : statistics) s /= 24.0f;
  Replica reference(testing::softmax_for(host.config), host.config.optimizer());
  const uint64_t expected = reference.apply_summed_update(gradient, 24.0f, statistics, host.lr);
  const std::optional<uint64_t> checksum = plane.apply_pending();
  ASSERT_TRUE(checksum.has_value());
  EXPECT_EQ(*checksum, expected);
  EXPECT_EQ(host.replica.parameter_checksum(), expected);
  EXPECT_FALSE(plane.workers_ahead());
  EXPECT_FALSE(plane.apply_pending().has_value()) << "applied twice";
}

TEST_F(ExchangePlaneTest, AMemberThatDiesInTheRoundHasItRedoneAtOnceAmongTheRest) {
  auto plans = host.plan_step(plane, {0, 1, 2}, 1, 4, kInf);
  deliver(1, report(1, plans.at(1), false));
  host.now += 0.3;
  host.declare_dead(2, "it died");
  plane.members_lost(host.now);

  // The next attempt's plan to the two left; its deadline from now.
  for (uint32_t rank : {0u, 1u}) {
    ASSERT_EQ(host.sent_to(name(rank)).size(), 1u) << name(rank);
    const v1::Plan& plan = host.sent_to(name(rank)).front().envelope.plan();
    EXPECT_EQ(plan.exchange().attempt(), 1u);
    EXPECT_EQ(std::vector<uint32_t>(plan.exchange().member_ranks().begin(),
                                    plan.exchange().member_ranks().end()),
              (std::vector<uint32_t>{0, 1}));
  }
  EXPECT_TRUE(host.sent_to(name(2)).empty());
  EXPECT_EQ(host.totals.exchange_rounds_redone(), 1u);
  EXPECT_GE(host.deadline(), host.now + 2.0 + 2 * 0.5);
  EXPECT_EQ(host.removed.at(2).first, Removal::kLost);

  // The old round's report is out of round; the new round's is taken.
  Message old = report(0, plans.at(0), true);
  EXPECT_TRUE(plane.out_of_round(old.envelope.contribution()).has_value());
  EXPECT_TRUE(plane.awaits(1)) << "a redo waits for every member left again";
  for (uint32_t rank : {0u, 1u}) {
    Message plan = testing::copy_of(host.sent_to(name(rank)).front());
    deliver(rank, report(rank, plan, rank == 0));
  }
  EXPECT_TRUE(plane.all_in());
}

TEST_F(ExchangePlaneTest, AForwardedSumThatIsNotTheMembersIsRefusedAndTheNextIsAsked) {
  auto plans = host.plan_step(plane, {0, 1, 2}, 1, 4, kInf);
  for (uint32_t rank = 0; rank < 3; ++rank) deliver(rank, report(rank, plans.at(rank), rank == 0));
  ASSERT_TRUE(plane.hold_open(host.now));  // committed ahead of the sum
  std::vector<float> forged = sum;
  forged[0] += 1.0f;
  plane.on_sum(0,
               testing::round_sum(name(0), host.step(), 0, forged, host.replica.parameter_count()),
               host.now);
  EXPECT_TRUE(plane.hold_open(host.now)) << "the forged sum was taken";
  // Rank 1 is asked for the sum: a SumRequest after its commit.
  ASSERT_EQ(host.sent_to(name(1)).size(), 2u);
  EXPECT_TRUE(host.sent_to(name(1)).back().envelope.has_sum_request());
  EXPECT_EQ(host.membership.at(0).failed_rounds_in_a_row, 1u);
  plane.on_sum(1, testing::round_sum(name(1), host.step(), 0, sum, host.replica.parameter_count()),
               host.now);
  EXPECT_FALSE(plane.hold_open(host.now));
}

}  // namespace
}  // namespace dctrain
