// The exchange's round deadline follows measured rounds (coordinator/
// round_deadline.h): the timeout until a round is measured, then a
// multiple of their 95th percentile between a floor and the timeout, moving
// as the rounds do; and a member's failed rounds follow its identity across
// a restart under a new name (coordinator/step/membership.h).
#include "coordinator/planes/round_deadline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "coordinator/planes/round_clock.h"
#include "coordinator/step/membership.h"

namespace dctrain {
namespace {

TEST(RoundDeadline, IsTheTimeoutOnlyBeforeTheFirstMeasuredRound) {
  RoundDeadline d(4.0, 0.5, 10.0);
  EXPECT_DOUBLE_EQ(d.seconds(), 10.0) << "nothing measured";
  d.observe(0.2);
  EXPECT_DOUBLE_EQ(d.seconds(), 0.8);  // 4 x 0.2, from the first round on
  // Until 20 rounds, the 95th percentile is the slowest of them.
  d.observe(0.4);
  d.observe(0.1);
  EXPECT_DOUBLE_EQ(d.percentile(), 0.4);
  EXPECT_DOUBLE_EQ(d.seconds(), 1.6);
}

TEST(RoundDeadline, BeforeAnyRoundTheAnswerWaitIsAMultipleOfTheRoundInFlight) {
  RoundDeadline d(4.0, 0.5, 10.0);
  EXPECT_DOUBLE_EQ(d.seconds_given(0.3), 1.2);
  EXPECT_DOUBLE_EQ(d.seconds_given(0.01), 0.5) << "the floor";
  EXPECT_DOUBLE_EQ(d.seconds_given(5.0), 10.0) << "the ceiling";
  EXPECT_DOUBLE_EQ(d.seconds_given(std::numeric_limits<double>::quiet_NaN()), 10.0);
  d.observe(0.2);
  EXPECT_DOUBLE_EQ(d.seconds_given(3.0), 0.8) << "once rounds are measured, they decide";
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

TEST(RoundClock, AnEarlyReportMakesNobodyOverdueBeforeThePlansComputeBound) {
  RoundClock clock(10.0);
  // tau 1 s, grace 0.5 s: members compute until 1.5 s after the plan.
  clock.plan(100.0, 1.0, 0.5, false);
  EXPECT_DOUBLE_EQ(*clock.overdue_at(0.5), 102.0) << "late by this clock, even with no report";
  // A member reports failed the moment its plan arrives: nothing moves.
  clock.arrived(3, 100.01, 0.0, false);
  EXPECT_DOUBLE_EQ(*clock.overdue_at(0.5), 102.0);
  // A first report after the bound: the round deadline counts from it.
  RoundClock later(10.0);
  later.plan(100.0, 1.0, 0.5, false);
  later.arrived(0, 103.0, 1.2, false);
  EXPECT_DOUBLE_EQ(*later.overdue_at(0.5), 103.5);
}

TEST(RoundClock, TwoMembersThatHeardFromAllCorroborateEachOther) {
  RoundClock clock(10.0);
  clock.plan(0.0, std::numeric_limits<double>::infinity(), 0.5, false);
  // One says it heard from every member: its word alone moves nothing.
  clock.arrived(0, 0.2, 0.1, true);
  EXPECT_FALSE(clock.overdue_at(0.5).has_value());
  clock.arrived(0, 0.3, 0.1, true);  // said twice: still one member
  EXPECT_FALSE(clock.overdue_at(0.5).has_value());
  // A second one says so: the round deadline after it.
  clock.arrived(1, 0.4, 0.1, true);
  EXPECT_DOUBLE_EQ(*clock.overdue_at(0.5), 0.9);
  EXPECT_FALSE(clock.past_bound(100.0, 0.5)) << "no compute bound: never late by this clock";
  // Under a finite tau, the sooner of the two.
  RoundClock tau(10.0);
  tau.plan(0.0, 1.0, 0.5, false);
  tau.arrived(0, 0.2, 0.1, true);
  tau.arrived(1, 0.3, 0.1, true);
  EXPECT_DOUBLE_EQ(*tau.overdue_at(0.5), 0.8);
  EXPECT_FALSE(tau.past_bound(1.9, 0.5));
  EXPECT_TRUE(tau.past_bound(2.1, 0.5));
}

TEST(RoundClock, UnderTauInfinityTheBoundFollowsCommittedRoundsAndIsNoneBeforeThem) {
  RoundClock clock(2.0);
  clock.plan(0.0, std::numeric_limits<double>::infinity(), 0.5, false);
  clock.arrived(0, 0.01, 0.0, false);
  EXPECT_FALSE(clock.overdue_at(0.5).has_value()) << "no committed round yet: no bound";
  // A committed round that spanned 3 s: the next bound is 2 x 3 s.
  clock.plan(10.0, std::numeric_limits<double>::infinity(), 0.5, false);
  clock.arrived(0, 12.0, 1.9, false);
  clock.arrived(1, 13.0, 2.9, false);
  clock.committed();
  clock.plan(20.0, std::numeric_limits<double>::infinity(), 0.5, false);
  EXPECT_DOUBLE_EQ(*clock.overdue_at(0.5), 26.5);
  // Spans under half the timeout: the timeout.
  RoundClock fast(2.0);
  fast.plan(0.0, std::numeric_limits<double>::infinity(), 0.5, false);
  fast.arrived(0, 0.1, 0.05, false);
  fast.committed();
  fast.plan(1.0, std::numeric_limits<double>::infinity(), 0.5, false);
  EXPECT_DOUBLE_EQ(*fast.overdue_at(0.5), 3.5);
}

TEST(RoundClock, ARoundsTimeIsTheLowerMedianOfTheMembersMeasuredTimes) {
  RoundClock clock(10.0);
  clock.plan(0.0, 1.0, 0.5, false);
  // Three honest members: 50, 60 and 70 ms of round after their compute.
  clock.arrived(0, 1.05, 1.0, false);
  clock.arrived(1, 0.86, 0.8, false);
  clock.arrived(2, 0.97, 0.9, false);
  EXPECT_NEAR(*clock.round_seconds(), 0.06, 1e-9);
  // A fourth claims no compute at all (its round looks 1.1 s long): the
  // lower median of four stays an honest member's.
  clock.arrived(3, 1.1, 0.0, false);
  EXPECT_NEAR(*clock.round_seconds(), 0.06, 1e-9);
  // A claim of more compute than the time since the plan, or none that is a
  // number, counts as all of it, or none.
  RoundClock two(10.0);
  two.plan(0.0, 1.0, 0.5, false);
  two.arrived(0, 0.5, 100.0, false);
  two.arrived(1, 0.6, std::numeric_limits<double>::quiet_NaN(), false);
  EXPECT_DOUBLE_EQ(*two.round_seconds(), 0.0);
}

TEST(RoundClock, ARedoKeepsWhatIsLeftOfTheFirstRoundsBound) {
  RoundClock clock(10.0);
  clock.plan(0.0, 2.0, 0.5, false);
  clock.plan(1.0, 2.0, 0.5, true);  // a member died at 1 s; others still compute
  EXPECT_DOUBLE_EQ(clock.compute_bound_end(), 2.5);
  EXPECT_DOUBLE_EQ(*clock.overdue_at(0.5), 3.0);
  // A redo's time is the round's alone: the compute was done before it.
  clock.arrived(0, 1.2, 0.9, false);
  EXPECT_NEAR(*clock.round_seconds(), 0.2, 1e-12);
  clock.plan(5.0, 2.0, 0.5, true);  // past the bound: nothing left of it
  EXPECT_DOUBLE_EQ(*clock.overdue_at(0.5), 5.5);
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
