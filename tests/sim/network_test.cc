// The simulated network (sim/network.h): the star's gradients queue on the
// coordinator's link, the exchange's contributions cost one round among
// the members on the schedule the real exchange runs at that count (hops,
// messages, bytes) and pass no queue, a fitted network costs one time per
// message.
#include "sim/network.h"

#include <gtest/gtest.h>

namespace dctrain {
namespace {

using Direction = SimulatedNetwork::Direction;
constexpr double kLatency = 1e-4;
constexpr double kBandwidth = 1e9;
constexpr double kGradient = 1e6;  // bytes
constexpr double kEnvelope = 100;  // bytes

TEST(SimulatedNetwork, TheStarsGradientsTakeTheCoordinatorsLinkOneAtATimeEachWay) {
  SimulatedNetwork star = SimulatedNetwork::star(kLatency, kBandwidth, kGradient);
  const double one = (kGradient + kEnvelope) / kBandwidth;
  for (int k = 1; k <= 4; ++k) {
    EXPECT_DOUBLE_EQ(
        star.arrival(0.0, Direction::kToCoordinator, v1::Envelope::kContribution, kEnvelope),
        k * one + kLatency)
        << "contribution " << k << " waits for the " << k - 1 << " before it";
  }
  // The other direction has a queue of its own, empty so far.
  EXPECT_DOUBLE_EQ(star.arrival(0.0, Direction::kToWorker, v1::Envelope::kUpdate, kEnvelope),
                   one + kLatency);
  // A small message queues behind none.
  EXPECT_DOUBLE_EQ(star.arrival(0.0, Direction::kToCoordinator, v1::Envelope::kHeartbeat, 40),
                   kLatency + 40 / kBandwidth);
  // The link frees: a contribution sent after the queue has drained waits
  // for none.
  EXPECT_DOUBLE_EQ(
      star.arrival(1.0, Direction::kToCoordinator, v1::Envelope::kContribution, kEnvelope),
      1.0 + one + kLatency);
  EXPECT_STREQ(star.kind(), "star");
}

TEST(SimulatedNetwork, AnExchangeContributionCostsOneRoundAmongTheMembersAndQueuesNowhere) {
  SimulatedNetwork exchange = SimulatedNetwork::exchange(kLatency, kBandwidth, kGradient, 4);
  // 2 latencies + 2(N-1)/N of the gradient each way: 1.5 MB at 1 GB/s.
  const double round = 2 * kLatency + 1.5e-3;
  EXPECT_DOUBLE_EQ(exchange.round_seconds(), round);
  for (int k = 0; k < 4; ++k) {
    EXPECT_DOUBLE_EQ(
        exchange.arrival(0.5, Direction::kToCoordinator, v1::Envelope::kContribution, kEnvelope),
        0.5 + round + kLatency + kEnvelope / kBandwidth)
        << "the report of member " << k;
  }
  // The coordinator answers with a commit, not the sum.
  EXPECT_DOUBLE_EQ(exchange.arrival(0.5, Direction::kToWorker, v1::Envelope::kUpdate, kEnvelope),
                   0.5 + kLatency + kEnvelope / kBandwidth);
  // A joiner's state still comes through the coordinator's link.
  const double welcome = (kGradient + kEnvelope) / kBandwidth;
  EXPECT_DOUBLE_EQ(exchange.arrival(0.5, Direction::kToWorker, v1::Envelope::kWelcome, kEnvelope),
                   0.5 + welcome + kLatency);
  EXPECT_DOUBLE_EQ(exchange.arrival(0.5, Direction::kToWorker, v1::Envelope::kWelcome, kEnvelope),
                   0.5 + 2 * welcome + kLatency);
  EXPECT_STREQ(exchange.kind(), "exchange");
}

TEST(SimulatedNetwork, AnExchangeRoundCostsWhatItsScheduleSendsAtThatMemberCount) {
  // One piece of 1 MB per message: the gradient fits one.
  ExchangeNetworkCosts costs;
  costs.message_seconds = 5e-6;
  costs.piece_bytes = 1e6;
  // Direct below 16 members: 2 hops, 2(N-1) messages, 2(N-1)/N of the bytes.
  const SimulatedNetwork eight =
      SimulatedNetwork::exchange(kLatency, kBandwidth, kGradient, 8, costs);
  EXPECT_EQ(eight.schedule(), ExchangeSchedule::kDirect);
  EXPECT_DOUBLE_EQ(eight.round_seconds(), 2 * kLatency + 14 * 5e-6 + 1.75e-3);
  // Halving from 16: at 1,024 members 20 hops and 20 messages (a level's
  // half in one message each way), where direct would send 2,046.
  const SimulatedNetwork big =
      SimulatedNetwork::exchange(kLatency, kBandwidth, kGradient, 1024, costs);
  EXPECT_EQ(big.schedule(), ExchangeSchedule::kHalving);
  EXPECT_DOUBLE_EQ(big.round_cost().hops, 20.0);
  EXPECT_DOUBLE_EQ(big.round_cost().messages, 20.0);
  const ExchangeRoundCost direct =
      exchange_round_cost(ExchangeSchedule::kDirect, 1024, kGradient, 1e6);
  EXPECT_DOUBLE_EQ(direct.messages, 2046.0);
  EXPECT_LT(big.round_seconds(),
            direct.hops * kLatency + direct.messages * 5e-6 + direct.bytes / kBandwidth);
  // Not a power of two: the folded pair's whole buffer in and sum out.
  const ExchangeRoundCost odd = exchange_round_cost(ExchangeSchedule::kHalving, 24, kGradient, 1e6);
  EXPECT_DOUBLE_EQ(odd.hops, 2 * 4 + 2.0);
  EXPECT_DOUBLE_EQ(odd.bytes, 2 * 15.0 / 16 * kGradient + 2 * kGradient);
  // The schedule the config names: direct always.
  costs.halving_from = 0;
  EXPECT_EQ(SimulatedNetwork::exchange(kLatency, kBandwidth, kGradient, 1024, costs).schedule(),
            ExchangeSchedule::kDirect);
}

TEST(SimulatedNetwork, AFittedNetworkCostsEveryMessageTheSameWhateverItsBytes) {
  SimulatedNetwork fitted = SimulatedNetwork::fitted(0.008);
  EXPECT_DOUBLE_EQ(
      fitted.arrival(1.0, Direction::kToCoordinator, v1::Envelope::kContribution, kEnvelope),
      1.008);
  EXPECT_DOUBLE_EQ(
      fitted.arrival(1.0, Direction::kToCoordinator, v1::Envelope::kContribution, kEnvelope),
      1.008);
  EXPECT_DOUBLE_EQ(fitted.arrival(1.0, Direction::kToWorker, v1::Envelope::kHeartbeat, 10), 1.008);
  EXPECT_NE(fitted.describe().find("0.008 s per message"), std::string::npos) << fitted.describe();
}

}  // namespace
}  // namespace dctrain
