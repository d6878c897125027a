// The NTP-style offset estimator: exact with symmetric delays, within half
// the round trip with asymmetric ones, keeps the tightest round trip, and
// refuses timestamps no pair of clocks could give.
#include "trace/clock_offset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace dctrain {
namespace {

// A round trip between this clock and a peer clock `offset` ahead: sent at
// `t0`, `d1` on the way out, `hold` at the peer, `d2` on the way back.
RoundTrip trip(double offset, double t0, double d1, double hold, double d2) {
  RoundTrip r;
  r.sent = t0;
  r.peer_received = t0 + d1 + offset;
  r.peer_sent = r.peer_received + hold;
  r.received = t0 + d1 + hold + d2;
  return r;
}

TEST(ClockOffset, SymmetricDelaysGiveTheOffsetExactly) {
  ClockOffsetEstimator clock;
  EXPECT_FALSE(clock.estimate().has_value());
  EXPECT_EQ(clock.to_local(12.5), 12.5) << "no estimate: times unchanged";
  ASSERT_TRUE(clock.add(trip(-3.25, 100.0, 0.002, 0.5, 0.002)));
  ASSERT_TRUE(clock.estimate().has_value());
  EXPECT_NEAR(clock.estimate()->offset, -3.25, 1e-12);
  EXPECT_NEAR(clock.estimate()->round_trip, 0.004, 1e-12);
  EXPECT_NEAR(clock.estimate()->error_bound(), 0.002, 1e-12);
  // A peer time maps back to this clock.
  EXPECT_NEAR(clock.to_local(96.75), 100.0, 1e-12);
}

TEST(ClockOffset, AsymmetricDelaysAreOffByHalfTheirDifferenceWithinTheBound) {
  ClockOffsetEstimator clock;
  // 9 ms out, 1 ms back: the estimate is 4 ms too large, the bound 5 ms.
  ASSERT_TRUE(clock.add(trip(7.0, 50.0, 0.009, 0.2, 0.001)));
  EXPECT_NEAR(clock.estimate()->offset, 7.0 + 0.004, 1e-12);
  EXPECT_NEAR(clock.estimate()->error_bound(), 0.005, 1e-12);
  // All the delay on the way back: the estimate is low by the whole bound.
  ClockOffsetEstimator back;
  ASSERT_TRUE(back.add(trip(7.0, 50.0, 0.0, 0.2, 0.010)));
  EXPECT_NEAR(back.estimate()->offset, 7.0 - 0.005, 1e-12);
  EXPECT_NEAR(back.estimate()->error_bound(), 0.005, 1e-12);
}

TEST(ClockOffset, KeepsTheRoundTripWithTheSmallestDelay) {
  ClockOffsetEstimator clock;
  ASSERT_TRUE(clock.add(trip(1.0, 10.0, 0.030, 0.1, 0.001)));  // delay 31 ms, off by 14.5 ms
  ASSERT_TRUE(clock.add(trip(1.0, 11.0, 0.001, 0.1, 0.003)));  // delay 4 ms, off by -1 ms
  ASSERT_TRUE(clock.add(trip(1.0, 12.0, 0.050, 0.1, 0.002)));  // delay 52 ms: worse, ignored
  EXPECT_EQ(clock.samples(), 3u);
  EXPECT_NEAR(clock.estimate()->round_trip, 0.004, 1e-12);
  EXPECT_NEAR(clock.estimate()->offset, 1.0 - 0.001, 1e-12);
}

TEST(ClockOffset, TheTrueOffsetIsAlwaysWithinTheBound) {
  // Random offsets and one-way delays (queueing on either side): whatever
  // the asymmetry, the estimator's bound holds, and more samples tighten it.
  std::mt19937_64 random(42);
  std::uniform_real_distribution<double> offset_of(-1000.0, 1000.0);
  std::exponential_distribution<double> delay_of(1.0 / 0.004);
  std::uniform_real_distribution<double> hold_of(0.0, 2.0);
  for (int peer = 0; peer < 50; ++peer) {
    const double offset = offset_of(random);
    ClockOffsetEstimator clock;
    double first_bound = 0.0;
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE(
          clock.add(trip(offset, 1000.0 + i, delay_of(random), hold_of(random), delay_of(random))));
      const ClockEstimate e = *clock.estimate();
      if (i == 0) first_bound = e.error_bound();
      EXPECT_LE(std::abs(e.offset - offset), e.error_bound() + 1e-9)
          << "peer " << peer << " sample " << i;
    }
    EXPECT_LE(clock.estimate()->error_bound(), first_bound);
  }
}

TEST(ClockOffset, RefusesTimestampsNoClocksCouldGive) {
  ClockOffsetEstimator clock;
  RoundTrip nan = trip(0.0, 1.0, 0.001, 0.1, 0.001);
  nan.peer_sent = std::nan("");
  EXPECT_FALSE(clock.add(nan));
  RoundTrip inf = trip(0.0, 1.0, 0.001, 0.1, 0.001);
  inf.received = INFINITY;
  EXPECT_FALSE(clock.add(inf));
  // The peer held the message longer than the whole round trip.
  RoundTrip negative = trip(0.0, 1.0, 0.001, 0.1, 0.001);
  negative.peer_sent += 1.0;
  EXPECT_FALSE(clock.add(negative));
  // Answered before it was received.
  RoundTrip backwards = trip(0.0, 1.0, 0.001, 0.1, 0.001);
  backwards.peer_sent = backwards.peer_received - 0.01;
  EXPECT_FALSE(clock.add(backwards));
  EXPECT_EQ(clock.samples(), 0u);
  EXPECT_FALSE(clock.estimate().has_value());
}

}  // namespace
}  // namespace dctrain
