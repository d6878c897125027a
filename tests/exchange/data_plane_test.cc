// The worker's end of the data plane (worker/data_plane.h) with two members
// as threads of one process over tcp://127.0.0.1: with CURVE the round runs
// on the keys the plan names, and a plan without keys is refused (never
// plain TCP instead); a sum holding 1e30 or NaN is refused by every member,
// so no replica applies it; a clean round gives the sum.
#include "worker/data_plane.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <thread>

#include "comm/security.h"
#include "exchange/sum_digest.h"

namespace dctrain {
namespace {

using Clock = std::chrono::steady_clock;

SocketSecurity curve_security() {
  SocketSecurity s;
  s.curve = true;
  s.own = generate_curve_keypair();
  s.server_public_key = generate_curve_keypair().public_key;  // the coordinator's: not used here
  return s;
}

struct Pair {
  explicit Pair(const std::vector<SocketSecurity>& security) {
    for (const SocketSecurity& s : security) {
      planes.push_back(std::make_unique<WorkerDataPlane>("tcp://127.0.0.1:*", "tcp://127.0.0.1:1",
                                                         s, spdlog::default_logger()));
      keys.push_back(s.own.public_key);
    }
  }
  v1::ExchangePlan plan(bool with_keys) const {
    v1::ExchangePlan p;
    for (uint32_t r = 0; r < planes.size(); ++r) {
      p.add_member_ranks(r);
      p.add_member_endpoints(planes[r]->endpoint());
      p.add_member_tokens(planes[r]->token());
      if (with_keys) p.add_member_keys(keys[r]);
    }
    return p;
  }
  // One round at `step`: member r contributes buffers[r] (summed in place).
  // Every member admits the plan's keys first, as a worker does when the
  // plan arrives (Trainer::on_exchange_plan).
  std::vector<v1::ExchangeReport> round(uint64_t step, const v1::ExchangePlan& plan,
                                        std::vector<std::vector<float>>& buffers) {
    for (auto& p : planes) p->admit(step, plan);
    std::vector<v1::ExchangeReport> reports(planes.size());
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < planes.size(); ++r) {
      threads.emplace_back([&, r] {
        reports[r] = planes[r]->exchange(step, r, plan, buffers[r], buffers[r], 10, deadline);
      });
    }
    for (auto& t : threads) t.join();
    return reports;
  }
  std::vector<std::unique_ptr<WorkerDataPlane>> planes;
  std::vector<std::string> keys;
};

std::vector<std::vector<float>> clean_buffers(size_t n) {
  std::vector<std::vector<float>> b(2, std::vector<float>(n));
  for (size_t i = 0; i < n; ++i) {
    b[0][i] = 0.25f * static_cast<float>(i % 7);
    b[1][i] = -0.5f * static_cast<float>(i % 5);
  }
  return b;
}

void expect_sum(const std::vector<v1::ExchangeReport>& reports,
                const std::vector<std::vector<float>>& buffers, size_t n) {
  for (const v1::ExchangeReport& r : reports) {
    EXPECT_TRUE(r.ok()) << r.error();
    EXPECT_FALSE(r.sum_unusable());
    EXPECT_EQ(r.samples(), 20u);
  }
  for (const auto& b : buffers) {
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(b[i], 0.25f * static_cast<float>(i % 7) + -0.5f * static_cast<float>(i % 5)) << i;
    }
  }
  // Each member reports the digests of the sum it holds, one per shard:
  // the same on every member, and those of the sum.
  const std::vector<std::string> expected =
      shard_digests(buffers[0], reports.size(), SumDigestKind::kBlake2b);
  for (const v1::ExchangeReport& r : reports) {
    EXPECT_EQ(std::vector<std::string>(r.sum_digests().begin(), r.sum_digests().end()), expected);
  }
}

TEST(ExchangeDataPlane, APlanWithoutTheMembersTokensIsRefused) {
  Pair pair({SocketSecurity{}, SocketSecurity{}});
  v1::ExchangePlan plan = pair.plan(false);
  plan.clear_member_tokens();
  auto buffers = clean_buffers(64);
  for (const v1::ExchangeReport& r : pair.round(1, plan, buffers)) {
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error().find("the plan names 0 connection tokens for 2 members"), std::string::npos)
        << r.error();
  }
}

TEST(ExchangeDataPlane, AFailedRoundLeavesTheContributionForTheNextAttempt) {
  Pair pair({SocketSecurity{}, SocketSecurity{}});
  const size_t n = 3001;
  const std::vector<std::vector<float>> contributions = clean_buffers(n);
  const std::vector<std::vector<float>> kept = contributions;
  std::vector<std::vector<float>> results(2, std::vector<float>(n, 7.0f));
  // Attempt 0: member 1 never takes part; member 0 fails by its deadline.
  const v1::ExchangePlan first = pair.plan(false);
  const v1::ExchangeReport failed = pair.planes[0]->exchange(
      5, 0, first, contributions[0], results[0], 10, Clock::now() + std::chrono::milliseconds(300));
  EXPECT_FALSE(failed.ok());
  ASSERT_EQ(failed.suspects_size(), 1);
  EXPECT_EQ(failed.suspects(0), 1u);
  EXPECT_EQ(contributions[0], kept[0]) << "the contribution must survive a failed round";
  // Attempt 1 of the same step, both members, from the same contributions.
  v1::ExchangePlan again = first;
  again.set_attempt(1);
  std::vector<v1::ExchangeReport> reports(2);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  std::thread t([&] {
    reports[1] = pair.planes[1]->exchange(5, 1, again, contributions[1], results[1], 10, deadline);
  });
  reports[0] = pair.planes[0]->exchange(5, 0, again, contributions[0], results[0], 10, deadline);
  t.join();
  expect_sum(reports, results, n);
  EXPECT_EQ(reports[0].attempt(), 1u);
  EXPECT_EQ(contributions, kept);
}

TEST(ExchangeDataPlane, WithCurveTheRoundRunsOnThePlansKeysAndAPlanWithoutKeysIsRefused) {
  Pair pair({curve_security(), curve_security()});
  const size_t n = 50'001;
  auto buffers = clean_buffers(n);
  expect_sum(pair.round(1, pair.plan(true), buffers), buffers, n);

  // No keys in the plan: each member refuses at once, sending nothing.
  buffers = clean_buffers(n);
  const auto refused = pair.round(2, pair.plan(false), buffers);
  for (const v1::ExchangeReport& r : refused) {
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(r.sum_unusable());
    EXPECT_NE(r.error().find("this worker runs CURVE but the plan names 0 public keys for 2 "
                             "members"),
              std::string::npos)
        << r.error();
  }
  // A plan naming another key for rank 1: rank 0 cannot authenticate it,
  // so the round fails by its deadline instead of going in plain text.
  v1::ExchangePlan wrong = pair.plan(true);
  wrong.set_member_keys(1, generate_curve_keypair().public_key);
  buffers = clean_buffers(n);
  std::vector<v1::ExchangeReport> reports(2);
  for (auto& p : pair.planes) p->admit(3, wrong);
  const auto deadline = Clock::now() + std::chrono::milliseconds(1500);
  std::thread t([&] {
    reports[1] = pair.planes[1]->exchange(3, 1, wrong, buffers[1], buffers[1], 10, deadline);
  });
  reports[0] = pair.planes[0]->exchange(3, 0, wrong, buffers[0], buffers[0], 10, deadline);
  t.join();
  EXPECT_FALSE(reports[0].ok());
  EXPECT_FALSE(reports[1].ok());
  // And the next round with the right keys goes through again.
  buffers = clean_buffers(n);
  expect_sum(pair.round(4, pair.plan(true), buffers), buffers, n);
}

TEST(ExchangeDataPlane, ASumHoldingHugeOrNonFiniteValuesIsRefusedByEveryMember) {
  Pair pair({SocketSecurity{}, SocketSecurity{}});
  const size_t n = 20'003;
  uint64_t step = 1;
  for (const float poison : {1e30f, std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(), 1.9e19f}) {
    auto buffers = clean_buffers(n);
    buffers[1][n / 2] = poison;  // only rank 1 contributes it
    const auto reports = pair.round(step++, pair.plan(false), buffers);
    for (const v1::ExchangeReport& r : reports) {
      EXPECT_FALSE(r.ok()) << poison;
      EXPECT_TRUE(r.sum_unusable()) << poison;
      EXPECT_NE(r.error().find("the exchanged sum holds NaN, infinite or overflowing values"),
                std::string::npos)
          << r.error();
    }
  }
  // Two values each below 2^64 whose sum is not: refused too.
  auto buffers = clean_buffers(n);
  buffers[0][7] = 1.0e19f;
  buffers[1][7] = 1.0e19f;
  for (const v1::ExchangeReport& r : pair.round(step++, pair.plan(false), buffers)) {
    EXPECT_TRUE(r.sum_unusable()) << r.ShortDebugString();
  }
  // Just below the bound, and clean rounds: taken.
  buffers = clean_buffers(n);
  buffers[1][3] = 1.8e19f;
  for (const v1::ExchangeReport& r : pair.round(step++, pair.plan(false), buffers)) {
    EXPECT_TRUE(r.ok()) << r.error();
  }
  buffers = clean_buffers(n);
  expect_sum(pair.round(step++, pair.plan(false), buffers), buffers, n);
}

}  // namespace
}  // namespace dctrain
