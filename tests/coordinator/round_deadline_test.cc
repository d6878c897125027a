// The exchange's round deadline follows measured rounds (coordinator/
// round_deadline.h): the timeout until enough rounds are measured, then a
// multiple of their 95th percentile between a floor and the timeout, moving
// as the rounds do; and a member's failed rounds follow its identity across
// a restart under a new name (coordinator/membership.h).
#include "coordinator/round_deadline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "coordinator/membership.h"

namespace dctrain {
namespace {

TEST(RoundDeadline, IsTheTimeoutUntilFiveRoundsAreMeasured) {
  RoundDeadline d(4.0, 0.5, 10.0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(d.seconds(), 10.0) << i << " rounds";
    d.observe(0.2);
  }
  d.observe(0.2);
  EXPECT_EQ(d.observed(), 5u);
  EXPECT_DOUBLE_EQ(d.seconds(), 0.8);  // 4 x 0.2
}

TEST(RoundDeadline, IsAMultipleOfThe95thPercentileBetweenTheFloorAndTheTimeout) {
  RoundDeadline d(4.0, 0.5, 10.0);
  // 19 rounds of 0.2 s and one of 0.3 s: the 95th percentile (nearest rank,
  // the 19th of 20) is 0.2 s; a 21st round of 0.3 s makes it 0.3 s.
  for (int i = 0; i < 19; ++i) d.observe(0.2);
  d.observe(0.3);
  EXPECT_DOUBLE_EQ(d.percentile(), 0.2);
  EXPECT_DOUBLE_EQ(d.seconds(), 0.8);
  d.observe(0.3);
  EXPECT_DOUBLE_EQ(d.percentile(), 0.3);
  EXPECT_NEAR(d.seconds(), 1.2, 1e-12);
  // Rounds of a few milliseconds: the floor.
  RoundDeadline fast(4.0, 0.5, 10.0);
  for (int i = 0; i < 10; ++i) fast.observe(0.004);
  EXPECT_DOUBLE_EQ(fast.seconds(), 0.5);
  // Rounds of seconds: never past the timeout.
  RoundDeadline slow(4.0, 0.5, 10.0);
  for (int i = 0; i < 10; ++i) slow.observe(3.0);
  EXPECT_DOUBLE_EQ(slow.seconds(), 10.0);
}

TEST(RoundDeadline, FollowsTheRecentRoundsAsOldOnesLeaveTheWindow) {
  // A run whose rounds slow down (a link degrades), then recover: the limit
  // tracks the last 50 rounds, as a fake clock of round times would show.
  RoundDeadline d(4.0, 0.1, 60.0);
  for (int i = 0; i < 50; ++i) d.observe(0.05);
  EXPECT_DOUBLE_EQ(d.seconds(), 0.2);
  for (int i = 0; i < 50; ++i) d.observe(1.0);
  EXPECT_DOUBLE_EQ(d.seconds(), 4.0);
  for (int i = 0; i < 47; ++i) d.observe(0.05);
  // Three slow rounds left of 50: above the 95th percentile's rank (48th).
  EXPECT_DOUBLE_EQ(d.percentile(), 1.0) << "3 of 50 slow: still within the top 5%";
  d.observe(0.05);
  EXPECT_DOUBLE_EQ(d.percentile(), 0.05) << "2 of 50 slow: outside the 95th percentile";
  EXPECT_DOUBLE_EQ(d.seconds(), 0.2);
  EXPECT_EQ(d.observed(), RoundDeadline::kWindow);
}

TEST(RoundDeadline, IgnoresTimesThatAreNoTimes) {
  RoundDeadline d(4.0, 0.5, 10.0);
  d.observe(std::numeric_limits<double>::quiet_NaN());
  d.observe(std::numeric_limits<double>::infinity());
  d.observe(-1.0);
  EXPECT_EQ(d.observed(), 0u);
  EXPECT_DOUBLE_EQ(d.seconds(), 10.0);
}

TEST(WorkerIdentity, IsTheKeyElseTheHostOfTheExchangeEndpoint) {
  EXPECT_EQ(worker_identity("K3y", "tcp://10.0.0.5:4000"), "key K3y");
  EXPECT_EQ(worker_identity("", "tcp://10.0.0.5:4000"), "host 10.0.0.5");
  EXPECT_EQ(worker_identity("", "tcp://node-7.cluster:41234"), "host node-7.cluster");
  EXPECT_EQ(worker_identity("", "ipc:///tmp/x"), "host (ipc)");
  EXPECT_EQ(worker_identity("", ""), "");
}

TEST(Membership, FailedRoundsFollowTheIdentityToAWorkerRestartedUnderANewName) {
  Membership members(3);
  const uint32_t bad = *members.admit("host-a:100", 1, 0.0);
  members.identify(bad, "host host-a");
  const uint32_t other = *members.admit("host-b:200", 1, 0.0);
  members.identify(other, "host host-b");
  members.at(bad).failed_rounds_in_a_row = 2;
  members.mark_dead(bad);
  // Restarted on host-a under a new default name: it keeps the count.
  const uint32_t again = *members.admit("host-a:101", 1, 1.0);
  EXPECT_EQ(members.at(again).failed_rounds_in_a_row, 0u) << "a new name starts at 0 ...";
  members.identify(again, "host host-a");
  EXPECT_EQ(members.at(again).failed_rounds_in_a_row, 2u) << "... until its identity is known";
  // Taken once: a second new worker of that host starts afresh.
  members.mark_dead(again);
  members.at(again).failed_rounds_in_a_row = 0;
  const uint32_t third = *members.admit("host-a:102", 1, 2.0);
  members.identify(third, "host host-a");
  EXPECT_EQ(members.at(third).failed_rounds_in_a_row, 2u) << "left by the second at its death";
  // Another host's worker inherits nothing.
  const uint32_t fresh = *members.admit("host-c:300", 1, 3.0);
  members.identify(fresh, "host host-c");
  EXPECT_EQ(members.at(fresh).failed_rounds_in_a_row, 0u);
}

}  // namespace
}  // namespace dctrain
