// The allreduce among peers as threads of one process over tcp://127.0.0.1
// (ephemeral ports): the result on every member is bit for bit the rank-order
// sum (the tree of comm/rank_order_sum.h, the star's too), for 1 to 7 members
// and lengths that fit neither the member count nor the piece size; a round
// repeated gives the same bits; a member that never sends, dies, stalls
// after contributing or disagrees makes every other member fail by the
// deadline naming it; every member finds a value of the sum that is not
// usable wherever it lies; a late piece of an earlier round is never summed;
// with CURVE a wiretap on a link reads none of it, each round admits exactly
// its members' keys, and a member cannot send as another.
#include "exchange/peer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "comm/framing.h"
#include "exchange/chunk.h"
#include "exchange/sum_digest.h"
#include "proto/wire.pb.h"
#include "tests/comm/tcp_tap.h"
#include "tests/testing/tree_sum.h"

namespace dctrain {
namespace {

// A DEALER connected to `endpoint` as a hand-played sender (an intruder, a
// member's impersonator, a flood), under routing id `id` (none: ZeroMQ's
// own), closed without lingering.
zmq::socket_t hand_sender(zmq::context_t& context, const std::string& endpoint,
                          const std::string& id = "") {
  zmq::socket_t s(context, zmq::socket_type::dealer);
  if (!id.empty()) s.set(zmq::sockopt::routing_id, id);
  s.set(zmq::sockopt::linger, 0);
  s.connect(endpoint);
  return s;
}

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Floats over 24 binary orders of magnitude, both signs and some -0.0, so
// that summing in another order changes bits.
std::vector<float> values(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = rng();
    v[i] = (bits % 17 == 0) ? -0.0f : std::ldexp(mantissa(rng), exponent(rng));
    if (bits & 2) v[i] = -v[i];
  }
  return v;
}

// The reference: the tree over the contributions in rank order
// (comm/rank_order_sum.h), written out.
std::vector<float> rank_order_sum(const std::vector<std::vector<float>>& contributions) {
  return contributions.empty() ? std::vector<float>{} : testing::tree_sum(contributions);
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

ExchangeOptions options(size_t piece_bytes, bool copy_sends = false) {
  ExchangeOptions o;
  o.piece_bytes = piece_bytes;
  o.copy_sends = copy_sends;
  return o;
}

// `size` peers (each with its own ZeroMQ context, as in separate processes),
// bound on ephemeral ports and connected to each other.
struct Group {
  explicit Group(size_t size, ExchangeOptions options = {},
                 const std::string& bind = "tcp://127.0.0.1:*") {
    options.io_threads = 1;  // seven peers on two cores
    for (uint32_t r = 0; r < size; ++r) {
      peers.push_back(std::make_unique<ExchangePeer>(r, bind, options));
      endpoints.push_back(peers.back()->endpoint());
    }
    for (auto& p : peers) p->connect(endpoints);
  }
  std::vector<std::unique_ptr<ExchangePeer>> peers;
  std::vector<std::string> endpoints;
};

struct RoundRun {
  std::vector<std::vector<float>> results;  // per member
  std::vector<ExchangeOutcome> outcomes;
};

// One round on `members` of `group`, each in its own thread, member i
// contributing contributions[i] with samples 10 + rank; the members in
// `absent` do not call exchange() (their entries stay empty).
RoundRun run_round(Group& group, const ExchangeRound& round, const std::vector<uint32_t>& members,
                   const std::vector<std::vector<float>>& contributions, milliseconds budget,
                   bool in_place = false, const std::vector<uint32_t>& absent = {},
                   milliseconds after_all_heard = milliseconds(0)) {
  RoundRun run;
  run.results.resize(members.size());
  run.outcomes.resize(members.size());
  const auto deadline = Clock::now() + budget;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    if (std::find(absent.begin(), absent.end(), members[i]) != absent.end()) continue;
    threads.emplace_back([&, i] {
      run.results[i] =
          in_place ? contributions[i] : std::vector<float>(contributions[i].size(), 12345.0f);
      const std::span<const float> in = in_place ? std::span<const float>(run.results[i])
                                                 : std::span<const float>(contributions[i]);
      run.outcomes[i] = group.peers[members[i]]->exchange(round, members, in, 10 + members[i],
                                                          run.results[i], deadline, after_all_heard);
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

std::vector<std::vector<float>> contributions_for(size_t members, size_t length, uint64_t seed) {
  std::vector<std::vector<float>> c;
  for (size_t i = 0; i < members; ++i) c.push_back(values(seed * 1000 + i, length));
  return c;
}

// `every_count`: each member learnt every member's sample count (the
// direct schedule; on the halving one a member knows its own and the total).
void expect_rank_order_sum(const RoundRun& run, const std::vector<uint32_t>& members,
                           const std::vector<std::vector<float>>& contributions,
                           bool every_count = true) {
  const auto expected = rank_order_sum(contributions);
  uint64_t samples = 0;
  for (uint32_t m : members) samples += 10 + m;
  for (size_t i = 0; i < members.size(); ++i) {
    const ExchangeOutcome& o = run.outcomes[i];
    ASSERT_TRUE(o.ok) << "rank " << members[i] << ": " << o.error;
    EXPECT_TRUE(o.complete);
    EXPECT_TRUE(o.usable);
    EXPECT_TRUE(o.error.empty());
    EXPECT_TRUE(o.suspects().empty());
    EXPECT_EQ(o.samples, samples);
    ASSERT_EQ(o.member_samples.size(), members.size());
    for (size_t m = 0; m < members.size(); ++m) {
      if (every_count || m == i) {
        EXPECT_EQ(o.member_samples[m], 10 + members[m]);
      }
    }
    EXPECT_TRUE(same_bits(run.results[i], expected))
        << "rank " << members[i] << " differs from the rank-order sum";
    // The digests the peer took as the pieces landed (in whatever order)
    // are those of the sum it holds.
    EXPECT_EQ(o.shard_digests,
              shard_digests(run.results[i], members.size(), SumDigestKind::kBlake2b))
        << "rank " << members[i];
  }
}

struct Shape {
  size_t members;
  size_t length;
  size_t piece_bytes;
};

class ExchangeShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(ExchangeShapes, EveryMemberGetsTheRankOrderSumBitForBit) {
  const Shape s = GetParam();
  Group group(s.members, options(s.piece_bytes, false));
  std::vector<uint32_t> members(s.members);
  for (uint32_t r = 0; r < s.members; ++r) members[r] = r;
  const auto c = contributions_for(s.members, s.length, s.length + s.members);
  const RoundRun run = run_round(group, {1, 0}, members, c, milliseconds(60000));
  expect_rank_order_sum(run, members, c);
  // Each member sends (N-1)/N of the buffer per phase, give or take a float
  // per shard: 2(N-1)/N in all.
  for (const ExchangeOutcome& o : run.outcomes) {
    const double share = 2.0 * (s.members - 1) / s.members * s.length * sizeof(float);
    EXPECT_NEAR(static_cast<double>(o.stats.bytes_sent), share, 2.0 * s.members * sizeof(float));
    EXPECT_NEAR(static_cast<double>(o.stats.bytes_received), share,
                2.0 * s.members * sizeof(float));
    EXPECT_EQ(o.stats.refused, 0u);
    EXPECT_EQ(o.stats.stale, 0u);
  }
  for (const auto& peer : group.peers) EXPECT_EQ(peer->pieces_held(), 0u);
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (size_t n : {1u, 2u, 3u, 4u, 7u}) {
    // Shorter than the member count, odd, and pieces of 7 floats that fit
    // neither the shards nor the length.
    for (size_t length : {size_t{0}, size_t{1}, n - 1, size_t{13}, size_t{10007}}) {
      if (length == n - 1 && n <= 2) continue;  // already 0 or 1
      out.push_back({n, length, 28});
    }
    // About 4 MB in pieces of 1 MiB and in pieces of an odd number of floats.
    out.push_back({n, 1'000'003, size_t{1} << 20});
    out.push_back({n, 1'000'003, 4 * 65537});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Members, ExchangeShapes, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<Shape>& p) {
                           return "n" + std::to_string(p.param.members) + "_len" +
                                  std::to_string(p.param.length) + "_piece" +
                                  std::to_string(p.param.piece_bytes);
                         });

TEST(Exchange, MatchesTheRankOrderSumBitForBit) {
  // Members 0, 2, 3, 5 of six peers (1 and 4 sit out), contributing a
  // gradient and BatchNorm-like statistics in one span, as the caller lays
  // them out. The star's reducer sums the same tree (comm/rank_order_sum.h;
  // tests/coordinator/reducer_test.cc checks it against the same function).
  constexpr size_t kGradient = 1001, kStatistics = 7;
  Group group(6, options(4 * 37, false));
  const std::vector<uint32_t> members{0, 2, 3, 5};
  auto c = contributions_for(members.size(), kGradient + kStatistics, 77);
  for (auto& v : c) v[0] = -0.0f;  // the tree's 0.0f + root turns an all -0.0 column into +0.0
  const RoundRun run = run_round(group, {9, 0}, members, c, milliseconds(60000));

  const std::vector<float> expected = rank_order_sum(c);
  EXPECT_FALSE(std::signbit(expected[0]));
  for (size_t i = 0; i < members.size(); ++i) {
    ASSERT_TRUE(run.outcomes[i].ok) << run.outcomes[i].error;
    EXPECT_TRUE(same_bits(run.results[i], expected)) << "rank " << members[i];
  }
  // The check has teeth: the same values in another tree differ (rotated;
  // reversed, a balanced tree of four is its own mirror image).
  auto rotated = c;
  std::rotate(rotated.begin(), rotated.begin() + 1, rotated.end());
  EXPECT_FALSE(same_bits(rank_order_sum(rotated), expected));
}

TEST(Exchange, EveryMemberFindsAnUnusableValueWhicheverShardAndPieceHoldsIt) {
  // Three shards of several pieces each: the value is summed on its owner
  // and arrives at the others, in the first, a middle or the last piece.
  const size_t members = 3, length = 3 * 1000 + 7;
  Group group(members, options(1024));
  const std::vector<uint32_t> ranks = {0, 1, 2};
  uint64_t step = 1;
  for (const size_t at : {size_t{0}, size_t{1500}, length - 1}) {
    for (const float poison : {std::numeric_limits<float>::quiet_NaN(),
                               -std::numeric_limits<float>::infinity(), 2.0e19f}) {
      auto contributions = contributions_for(members, length, step);
      contributions[at % members][at] = poison;
      const RoundRun run =
          run_round(group, {step++, 0, 1}, ranks, contributions, milliseconds(5000));
      for (size_t i = 0; i < members; ++i) {
        const ExchangeOutcome& o = run.outcomes[i];
        ASSERT_TRUE(o.ok) << o.error;  // the round itself went through
        EXPECT_FALSE(o.usable) << "rank " << i << ", " << poison << " at " << at;
      }
    }
  }
  // And a clean round after them is usable again.
  const auto clean = contributions_for(members, length, step);
  expect_rank_order_sum(run_round(group, {step, 0, 1}, ranks, clean, milliseconds(5000)), ranks,
                        clean);
}

TEST(Exchange, ARepeatedRoundGivesTheSameBits) {
  const std::vector<uint32_t> members{0, 1, 2, 3};
  const auto c = contributions_for(4, 100'003, 5);
  Group group(4, options(4096, false));
  const RoundRun first = run_round(group, {1, 0}, members, c, milliseconds(60000));
  const RoundRun again = run_round(group, {2, 0}, members, c, milliseconds(60000));
  Group fresh(4, options(4096, false));
  const RoundRun other = run_round(fresh, {1, 0}, members, c, milliseconds(60000));
  for (size_t i = 0; i < members.size(); ++i) {
    ASSERT_TRUE(first.outcomes[i].ok && again.outcomes[i].ok && other.outcomes[i].ok);
    EXPECT_TRUE(same_bits(first.results[i], again.results[i]));
    EXPECT_TRUE(same_bits(first.results[i], other.results[i]));
    EXPECT_TRUE(same_bits(first.results[i], first.results[0]));
  }
}

TEST(Exchange, InPlaceAndCopiedSendsGiveTheSameBits) {
  const std::vector<uint32_t> members{0, 1, 2};
  const auto c = contributions_for(3, 30'011, 6);
  Group zero_copy(3, options(4000, false));
  Group copying(3, options(4000, true));
  const RoundRun in_place = run_round(zero_copy, {1, 0}, members, c, milliseconds(60000), true);
  expect_rank_order_sum(in_place, members, c);
  const RoundRun copied = run_round(copying, {1, 0}, members, c, milliseconds(60000));
  expect_rank_order_sum(copied, members, c);
}

TEST(Exchange, AMemberThatClosesRightAfterItsRoundLosesNothingForTheOthers) {
  // exchange() returns once its pieces are in the kernel, copied or not: a
  // member that finishes first and closes its peer at once (linger 0) must
  // not take its last sums with it.
  for (bool copy : {false, true}) {
    for (int repeat = 0; repeat < 5; ++repeat) {
      Group group(4, options(4 * 4096, copy));
      const std::vector<uint32_t> members{0, 1, 2, 3};
      const auto c = contributions_for(4, 200'003, 15 + repeat);
      RoundRun run;
      run.results.assign(4, std::vector<float>(200'003));
      run.outcomes.resize(4);
      const auto deadline = Clock::now() + milliseconds(60000);
      std::vector<std::thread> threads;
      for (uint32_t i = 0; i < 4; ++i) {
        threads.emplace_back([&, i] {
          run.outcomes[i] =
              group.peers[i]->exchange({1, 0}, members, c[i], 10 + i, run.results[i], deadline);
          group.peers[i].reset();
        });
      }
      for (auto& t : threads) t.join();
      expect_rank_order_sum(run, members, c);
    }
  }
}

TEST(Exchange, MembersOnOneHostCanUseUnixSockets) {
  Group group(3, options(4000), "ipc://*");
  for (const std::string& e : group.endpoints) EXPECT_EQ(e.rfind("ipc://", 0), 0u) << e;
  const std::vector<uint32_t> members{0, 1, 2};
  const auto c = contributions_for(3, 30'011, 14);
  expect_rank_order_sum(run_round(group, {1, 0}, members, c, milliseconds(60000)), members, c);
}

// Every member but `absent` fails by the deadline naming it.
void expect_all_blame(const RoundRun& run, const std::vector<uint32_t>& members, uint32_t absent,
                      milliseconds budget) {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == absent) continue;
    const ExchangeOutcome& o = run.outcomes[i];
    EXPECT_FALSE(o.ok) << "rank " << members[i];
    EXPECT_FALSE(o.complete) << "rank " << members[i];
    EXPECT_EQ(o.suspects(), std::vector<uint32_t>{absent}) << o.error;
    EXPECT_NE(o.error.find("rank " + std::to_string(absent) + " ("), std::string::npos) << o.error;
    EXPECT_NE(o.error.find("deadline"), std::string::npos) << o.error;
    // By the deadline, give or take a loaded machine's scheduling.
    EXPECT_LT(o.elapsed, budget + milliseconds(1500)) << "rank " << members[i];
  }
}

ExchangeOptions halving_options(size_t piece_bytes) {
  ExchangeOptions o = options(piece_bytes);
  o.halving_from = 1;  // every round on the halving schedule
  return o;
}

class HalvingShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(HalvingShapes, EveryMemberGetsTheRankOrderSumBitForBitOnTheHalvingSchedule) {
  const Shape s = GetParam();
  Group group(s.members, halving_options(s.piece_bytes));
  std::vector<uint32_t> members(s.members);
  for (uint32_t r = 0; r < s.members; ++r) members[r] = r;
  const auto c = contributions_for(s.members, s.length, s.length + s.members);
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "apart");
    const RoundRun run =
        run_round(group, {1, in_place ? 1u : 0u}, members, c, milliseconds(60000), in_place);
    expect_rank_order_sum(run, members, c, false);
    // A halver sends 2(P-1)/P of the buffer, and the whole sum once more
    // to its folded member if it has one; a folded member sends the buffer
    // once. Give or take a float per block and level.
    size_t p = 1;
    while (p * 2 <= s.members) p *= 2;
    const size_t extra = s.members - p;
    const double bytes = static_cast<double>(s.length * sizeof(float));
    for (size_t i = 0; i < s.members; ++i) {
      const ExchangeOutcome& o = run.outcomes[i];
      const bool folded = i < 2 * extra && i % 2 == 1;
      const double expected =
          folded ? bytes
                 : 2.0 * static_cast<double>(p - 1) / p * bytes + (i < 2 * extra ? bytes : 0.0);
      EXPECT_NEAR(static_cast<double>(o.stats.bytes_sent), expected, 8.0 * p * sizeof(float))
          << "position " << i;
      EXPECT_EQ(o.stats.refused, 0u);
      EXPECT_EQ(o.stats.stale, 0u);
    }
  }
  // Connections opened only to the schedule's partners: log2(P), and one
  // more for a folded pair.
  size_t levels = 0;
  while ((size_t{2} << levels) <= s.members) ++levels;
  for (const auto& peer : group.peers) {
    EXPECT_EQ(peer->pieces_held(), 0u);
    EXPECT_LE(peer->outbox_connections(), levels + 1);
  }
}

std::vector<Shape> halving_shapes() {
  std::vector<Shape> out;
  for (size_t n : {2u, 3u, 5u, 8u, 9u}) {
    for (size_t length : {size_t{0}, size_t{3}, size_t{10007}}) out.push_back({n, length, 28});
    out.push_back({n, 1'000'003, size_t{1} << 20});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Members, HalvingShapes, ::testing::ValuesIn(halving_shapes()),
                         [](const ::testing::TestParamInfo<Shape>& p) {
                           return "n" + std::to_string(p.param.members) + "_len" +
                                  std::to_string(p.param.length) + "_piece" +
                                  std::to_string(p.param.piece_bytes);
                         });

TEST(Exchange, OnTheHalvingScheduleADeadMemberFailsTheRoundByTheDeadlineAndTheRedoSumsTheRest) {
  // Six members: positions 0/1 and 2/3 fold, 0, 2, 4, 5 halve. Rank 4 dies:
  // its partners (ranks 0 and 5) name it; the round fails everywhere by the
  // deadline; the five left redo it (then 4 halvers, one pair) and get the
  // sum of the rest.
  Group group(6, halving_options(4 * 1024));
  const std::vector<uint32_t> all{0, 1, 2, 3, 4, 5}, others{0, 1, 2, 3, 5};
  const auto c = contributions_for(6, 50'001, 19);
  group.peers[4].reset();
  const milliseconds budget(800);
  const RoundRun failed = run_round(group, {1, 0}, all, c, budget, false, {4});
  for (uint32_t i : others) {
    const ExchangeOutcome& o = failed.outcomes[i];
    EXPECT_FALSE(o.ok) << "rank " << i;
    EXPECT_FALSE(o.suspects().empty()) << "rank " << i << ": " << o.error;
    EXPECT_LT(o.elapsed, budget + milliseconds(1500)) << "rank " << i;
  }
  for (uint32_t partner : {0u, 5u}) {
    const auto& missing = failed.outcomes[partner].missing_contributions;
    EXPECT_NE(std::find(missing.begin(), missing.end(), 4u), missing.end())
        << failed.outcomes[partner].error;
  }
  const std::vector<std::vector<float>> rest{c[0], c[1], c[2], c[3], c[5]};
  const RoundRun redo = run_round(group, {1, 1}, others, rest, milliseconds(60000));
  expect_rank_order_sum(redo, others, rest, false);
}

TEST(Exchange, ASwitchToTheHalvingScheduleClosesTheDirectSchedulesOtherConnections) {
  // Eight members run direct (each connects to the 7 others), then halving
  // (3 partners each): the outboxes no round uses any more are closed.
  Group group(8, options(4 * 1024));
  std::vector<uint32_t> all(8);
  for (uint32_t r = 0; r < 8; ++r) all[r] = r;
  const auto c = contributions_for(8, 5'001, 31);
  expect_rank_order_sum(run_round(group, {1, 0}, all, c, milliseconds(60000)), all, c);
  for (const auto& peer : group.peers) EXPECT_EQ(peer->outbox_connections(), 7u);
  for (auto& peer : group.peers) peer->set_halving_from(1);
  expect_rank_order_sum(run_round(group, {2, 0}, all, c, milliseconds(60000)), all, c, false);
  for (const auto& peer : group.peers) EXPECT_EQ(peer->outbox_connections(), 3u);
}

TEST(Exchange, MembersOnDifferentSchedulesConflictAtOnce) {
  // Rank 1 runs rounds of two direct, rank 0 halving: each names the other.
  ExchangeOptions direct = options(4 * 64);
  direct.halving_from = 0;
  ExchangePeer a(0, "tcp://127.0.0.1:*", halving_options(4 * 64));
  ExchangePeer b(1, "tcp://127.0.0.1:*", direct);
  const std::vector<std::string> endpoints{a.endpoint(), b.endpoint()};
  a.connect(endpoints);
  b.connect(endpoints);
  const std::vector<uint32_t> members{0, 1};
  const auto c = contributions_for(2, 1000, 4);
  std::vector<float> ra(1000), rb(1000);
  ExchangeOutcome oa, ob;
  const auto deadline = Clock::now() + milliseconds(60000);
  std::thread t([&] { ob = b.exchange({1, 0}, members, c[1], 11, rb, deadline); });
  oa = a.exchange({1, 0}, members, c[0], 10, ra, deadline);
  t.join();
  EXPECT_EQ(oa.conflicting, std::vector<uint32_t>{1}) << oa.error;
  EXPECT_NE(oa.error.find("runs the direct schedule"), std::string::npos) << oa.error;
  EXPECT_EQ(ob.conflicting, std::vector<uint32_t>{0}) << ob.error;
  EXPECT_NE(ob.error.find("runs the halving schedule"), std::string::npos) << ob.error;
}

TEST(Exchange, AMemberThatNeverSendsIsNamedByEveryOtherByTheDeadline) {
  Group group(4);
  const std::vector<uint32_t> all{0, 1, 2, 3}, others{0, 1, 3};
  const auto c = contributions_for(4, 50'001, 8);
  const milliseconds budget(800);
  // Rank 2 is connected, and a member of the round, but does not take part.
  const RoundRun failed = run_round(group, {1, 0}, all, c, budget, false, {2});
  expect_all_blame(failed, all, 2, budget);
  for (uint32_t i : others) {
    EXPECT_EQ(failed.outcomes[i].missing_contributions, std::vector<uint32_t>{2})
        << failed.outcomes[i].error;
  }
  // The caller redoes the round without rank 2: the sum of the other three.
  const std::vector<std::vector<float>> rest{c[0], c[1], c[3]};
  const RoundRun redo = run_round(group, {1, 1}, others, rest, milliseconds(60000));
  expect_rank_order_sum(redo, others, rest);
}

TEST(Exchange, ADeadMemberIsNamedByEveryOtherByTheDeadline) {
  Group group(4);
  const std::vector<uint32_t> all{0, 1, 2, 3}, others{0, 1, 3};
  const auto c = contributions_for(4, 50'001, 9);
  group.peers[2].reset();  // its socket is gone: connections to it are refused
  const milliseconds budget(800);
  const RoundRun failed = run_round(group, {1, 0}, all, c, budget, false, {2});
  expect_all_blame(failed, all, 2, budget);
  // Pieces queued for the dead member were dropped, so the survivors go on.
  const std::vector<std::vector<float>> rest{c[0], c[1], c[3]};
  const RoundRun redo = run_round(group, {1, 1}, others, rest, milliseconds(60000));
  expect_rank_order_sum(redo, others, rest);
}

// Ranks 0-2 are peers; rank 3 is played by hand: it sends its contribution
// pieces of `round`, as the wire format says, and then never its sums (a
// member stopped after its first pieces).
struct StalledFourthMember {
  explicit StalledFourthMember(const ExchangeRound& round_)
      : group(3, options(4 * 1000, false)),  // pieces of 1000 floats, as played below
        inbox(context, zmq::socket_type::router),
        round(round_),
        c(contributions_for(4, kLength, 10)) {
    inbox.set(zmq::sockopt::linger, 0);  // takes what the others send it
    inbox.bind("tcp://127.0.0.1:*");
    std::vector<std::string> endpoints = group.endpoints;
    endpoints.push_back(inbox.get(zmq::sockopt::last_endpoint));
    for (auto& p : group.peers) p->connect(endpoints);
    const ExchangePlan plan(kLength, 4, 1000);
    for (uint32_t to = 0; to < 3; ++to) {
      zmq::socket_t s = hand_sender(context, endpoints[to], "3");
      for (size_t k = 0; k < plan.pieces(to); ++k) {
        const PieceRange p = plan.piece(to, k);
        const ChunkHeader h{PieceKind::kContribution,
                            3,
                            4,
                            members_digest(members),
                            round,
                            kLength,
                            1000,
                            p.offset,
                            p.count,
                            13};
        const auto bytes = encode_header(h);
        s.send(zmq::buffer(bytes), zmq::send_flags::sndmore);
        s.send(zmq::buffer(c[3].data() + p.offset, p.count * sizeof(float)));
      }
      outboxes.push_back(std::move(s));
    }
  }
  static constexpr size_t kLength = 20'003;
  Group group;
  zmq::context_t context;
  zmq::socket_t inbox;
  std::vector<zmq::socket_t> outboxes;
  ExchangeRound round;
  const std::vector<uint32_t> members{0, 1, 2, 3};
  std::vector<std::vector<float>> c;
};

TEST(Exchange, AMemberThatStallsAfterContributingIsNamedAsTheMissingOwner) {
  StalledFourthMember stalled({4, 0});
  const std::vector<uint32_t>& members = stalled.members;
  const milliseconds budget(800);
  const RoundRun run =
      run_round(stalled.group, stalled.round, members, stalled.c, budget, false, {3});
  expect_all_blame(run, members, 3, budget);
  for (uint32_t i = 0; i < 3; ++i) {
    const ExchangeOutcome& o = run.outcomes[i];
    EXPECT_TRUE(o.missing_contributions.empty()) << o.error;
    EXPECT_EQ(o.missing_results, std::vector<uint32_t>{3}) << o.error;
    EXPECT_EQ(o.member_samples.back(), 13u) << "rank 3's sample count came with its pieces";
  }
}

TEST(Exchange, OnceEveryMemberWasHeardFromAStalledOneIsCutByTheRoundsLimit) {
  // The deadline is far off (a member may still be computing); once rank
  // 3's first pieces are in, the others wait only the round's limit.
  StalledFourthMember stalled({5, 0});
  const milliseconds budget(60'000), limit(300);
  const RoundRun run = run_round(stalled.group, stalled.round, stalled.members, stalled.c, budget,
                                 false, {3}, limit);
  for (uint32_t i = 0; i < 3; ++i) {
    const ExchangeOutcome& o = run.outcomes[i];
    EXPECT_FALSE(o.ok);
    EXPECT_TRUE(o.cut_short) << o.error;
    EXPECT_FALSE(o.cancelled);
    ASSERT_TRUE(o.all_heard_after.has_value());
    EXPECT_EQ(o.suspects(), std::vector<uint32_t>{3}) << o.error;
    EXPECT_NE(o.error.find("after every member was heard from"), std::string::npos) << o.error;
    // The limit after the last member was heard from, not the deadline.
    EXPECT_GE(o.elapsed, *o.all_heard_after + limit);
    EXPECT_LT(o.elapsed, budget / 2);
  }
}

TEST(Exchange, TheRoundsLimitDoesNotApplyWhileAMemberWasNeverHeardFrom) {
  // Rank 2 is still computing (it never calls exchange()): the others wait
  // for it until their deadline, whatever the limit after all were heard.
  Group group(3);
  const std::vector<uint32_t> all{0, 1, 2};
  const auto c = contributions_for(3, 1000, 12);
  const milliseconds budget(600);
  const RoundRun run = run_round(group, {1, 0}, all, c, budget, false, {2}, milliseconds(50));
  expect_all_blame(run, all, 2, budget);
  for (uint32_t i : {0u, 1u}) {
    EXPECT_FALSE(run.outcomes[i].cut_short);
    EXPECT_FALSE(run.outcomes[i].all_heard_after.has_value());
  }
}

TEST(Exchange, ARoundEndedFromAnotherThreadReturnsAtOnceAndIsRedoneWithoutTheMissing) {
  // Rank 2 died (the coordinator knows); ranks 0 and 1 wait in the round
  // with a far deadline until their sessions end it.
  Group group(3);
  const std::vector<uint32_t> all{0, 1, 2}, left{0, 1};
  const auto c = contributions_for(3, 30'001, 13);
  const milliseconds budget(60'000);
  std::thread session([&] {
    std::this_thread::sleep_for(milliseconds(200));
    for (uint32_t r : left) group.peers[r]->cancel().end_through({7, 0});
  });
  const RoundRun ended = run_round(group, {7, 0}, all, c, budget, false, {2});
  session.join();
  for (uint32_t i : left) {
    const ExchangeOutcome& o = ended.outcomes[i];
    EXPECT_FALSE(o.ok);
    EXPECT_TRUE(o.cancelled) << o.error;
    EXPECT_EQ(o.missing_contributions, std::vector<uint32_t>{2}) << o.error;
    EXPECT_NE(o.error.find("ended from outside"), std::string::npos) << o.error;
    EXPECT_LT(o.elapsed, budget / 2);
    EXPECT_EQ(group.peers[i]->pieces_held(), 0u) << "ZeroMQ let go of the buffers";
  }
  // The mark covers that round only: the next attempt runs to its sum.
  const std::vector<std::vector<float>> rest{c[0], c[1]};
  const RoundRun redo = run_round(group, {7, 1}, left, rest, budget);
  expect_rank_order_sum(redo, left, rest);
  // A round already ended never starts waiting: it returns at once.
  group.peers[0]->cancel().end_through({8, 0});
  std::vector<float> out(c[0].size());
  const ExchangeOutcome late = group.peers[0]->exchange({8, 0}, left, c[0], 10, out,
                                                        Clock::now() + budget);
  EXPECT_TRUE(late.cancelled);
  EXPECT_LT(late.elapsed, budget / 2);
}

TEST(Exchange, AMemberThatStopsReadingIsNamedAndTheBuffersAreLetGo) {
  // Rank 1 is played by hand: it sends its contribution to rank 0's shard
  // and the right sum of its own shard, so rank 0's result is complete, but
  // reads (almost) nothing: what rank 0 sends it stays queued until the
  // deadline, when rank 0 closes that socket to get its buffers back.
  const size_t length = 6'000'000;  // 12 MB each way, more than the kernel buffers
  Group group(1, options(size_t{1} << 20));
  zmq::context_t context;
  zmq::socket_t inbox(context, zmq::socket_type::router);
  inbox.set(zmq::sockopt::linger, 0);
  inbox.set(zmq::sockopt::rcvhwm, 1);
  inbox.set(zmq::sockopt::rcvbuf, 4096);
  inbox.bind("tcp://127.0.0.1:*");
  group.peers[0]->connect({group.endpoints[0], inbox.get(zmq::sockopt::last_endpoint)});

  const std::vector<uint32_t> members{0, 1};
  const auto c = contributions_for(2, length, 13);
  const auto expected = rank_order_sum(c);
  const ExchangeRound round{1, 0};
  const ExchangePlan plan(length, 2, 1 << 18);
  zmq::socket_t out = hand_sender(context, group.endpoints[0], "1");
  auto send = [&](PieceKind kind, size_t shard, size_t k, const float* values) {
    const PieceRange p = plan.piece(shard, k);
    const ChunkHeader h{kind,    1,
                        2,       members_digest(members),
                        round,   length,
                        1 << 18, p.offset,
                        p.count, kind == PieceKind::kContribution ? 11u : 21u};
    out.send(zmq::buffer(encode_header(h)), zmq::send_flags::sndmore);
    out.send(zmq::buffer(values + p.offset, p.count * sizeof(float)));
  };
  for (size_t k = 0; k < plan.pieces(0); ++k) send(PieceKind::kContribution, 0, k, c[1].data());
  for (size_t k = 0; k < plan.pieces(1); ++k) send(PieceKind::kResult, 1, k, expected.data());

  const milliseconds budget(1000);
  std::vector<float> result(length);
  const auto o = group.peers[0]->exchange(round, members, c[0], 10, result, Clock::now() + budget);
  EXPECT_FALSE(o.ok);
  EXPECT_TRUE(o.complete) << o.error;
  EXPECT_TRUE(same_bits(result, expected));
  EXPECT_EQ(o.samples, 21u);
  EXPECT_EQ(o.not_reading, std::vector<uint32_t>{1}) << o.error;
  EXPECT_EQ(o.suspects(), std::vector<uint32_t>{1}) << o.error;
  EXPECT_NE(o.error.find("rank 1 (tcp://127.0.0.1:"), std::string::npos) << o.error;
  EXPECT_NE(o.error.find("did not take this peer's pieces"), std::string::npos) << o.error;
  EXPECT_LT(o.elapsed, budget + milliseconds(1500));
  EXPECT_EQ(group.peers[0]->pieces_held(), 0u) << "ZeroMQ let go of the caller's buffers";
}

TEST(Exchange, AMemberThatDisagreesOnTheLengthIsNamedAtOnce) {
  Group group(3);
  const std::vector<uint32_t> members{0, 1, 2};
  const auto c = contributions_for(3, 5000, 11);
  const std::vector<float> shorter(4000, 1.0f);
  RoundRun run;
  run.results.resize(3);
  run.outcomes.resize(3);
  const milliseconds budget(20000);
  const auto deadline = Clock::now() + budget;
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      const std::span<const float> in = i == 1 ? std::span<const float>(shorter) : c[i];
      run.results[i].assign(in.size(), 0.0f);
      run.outcomes[i] = group.peers[i]->exchange({1, 0}, members, in, 10, run.results[i], deadline);
    });
  }
  for (auto& t : threads) t.join();
  for (uint32_t i : {0u, 2u}) {
    const ExchangeOutcome& o = run.outcomes[i];
    EXPECT_FALSE(o.ok);
    EXPECT_EQ(o.conflicting, std::vector<uint32_t>{1}) << o.error;
    EXPECT_EQ(o.suspects(), std::vector<uint32_t>{1}) << o.error;
    EXPECT_NE(o.error.find("exchanges 4000 floats"), std::string::npos) << o.error;
    EXPECT_LT(o.elapsed, budget / 2) << "a conflict is reported at once, not at the deadline";
    EXPECT_NE(o.error.find("on a conflicting piece"), std::string::npos) << o.error;
  }
  EXPECT_FALSE(run.outcomes[1].ok);
}

TEST(Exchange, ALatePieceOfAnEarlierRoundIsNeverSummed) {
  Group group(2, options(4 * 100, false));
  const std::vector<uint32_t> members{0, 1};
  const size_t length = 1001;
  // Round 4: only rank 1 takes part, with huge values; its pieces for rank
  // 0's shard reach rank 0 and wait there, unread. Rank 1 fails naming 0.
  const std::vector<float> huge(length, 1e30f);
  std::vector<float> lost(length);
  const auto failed =
      group.peers[1]->exchange({4, 0}, members, huge, 99, lost, Clock::now() + milliseconds(500));
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.suspects(), std::vector<uint32_t>{0}) << failed.error;
  // Round 5: both take part. Rank 0 reads round 4's pieces first.
  const auto c = contributions_for(2, length, 12);
  const RoundRun run = run_round(group, {5, 0}, members, c, milliseconds(60000));
  expect_rank_order_sum(run, members, c);
  const ExchangePlan plan(length, 2, 100);
  EXPECT_EQ(run.outcomes[0].stats.stale, plan.pieces(0)) << "every piece of round 4 dropped";
  EXPECT_EQ(run.outcomes[1].stats.stale, 0u);
}

TEST(Exchange, PiecesOfLaterRoundsAreKeptWithinABoundInCountNotOnlyInBytes) {
  // A connection floods rank 0 with empty pieces of a later round: they
  // cost no bytes, and each would be held until that round. Beyond the
  // bound they are refused. (It names itself 7, no member: the pieces of a
  // later round are kept before their sender is checked against that
  // round's members, which are not known yet.)
  Group group(2, options(4 * 100, false));
  zmq::context_t context;
  zmq::socket_t intruder = hand_sender(context, group.endpoints[0], "7");
  const std::vector<uint32_t> members{0, 1};
  const size_t length = 1001;
  const ChunkHeader h{PieceKind::kContribution, 7, 2, members_digest(members), {9, 0}, length,
                      100, 0, 0, 0};
  const auto bytes = encode_header(h);
  // Fewer than the high-water marks hold, so no send blocks once the
  // connection is up (the first waits for it).
  constexpr int kSent = 400;
  for (int i = 0; i < kSent; ++i) {
    intruder.send(zmq::buffer(bytes), zmq::send_flags::sndmore);
    intruder.send(zmq::message_t(), zmq::send_flags::none);
  }
  std::vector<float> c(length, 1.0f), out(length);
  const ExchangeOutcome o = group.peers[0]->exchange({5, 0}, members, c, 10, out,
                                                     Clock::now() + milliseconds(3000));
  EXPECT_FALSE(o.ok) << "rank 1 never took part in round 5: it read until its deadline";
  // Rank 0's shard has 6 pieces of 100 floats, rank 1's 5: a round brings
  // rank 0 at most 6 + 11 pieces; twice that and 64 more are kept.
  const uint64_t bound = 2 * (6 + 11) + 64;
  EXPECT_LE(o.stats.early, bound);
  EXPECT_EQ(o.stats.early, bound) << "the flood filled what is kept";
  EXPECT_EQ(o.stats.early + o.stats.refused, static_cast<uint64_t>(kSent));
  EXPECT_NE(o.stats.first_refusal.find("beyond what is kept"), std::string::npos)
      << o.stats.first_refusal;
}

TEST(Exchange, APieceOfALaterRunIsNotKept) {
  // Pieces kept for later rounds are those of this round's run: a piece
  // that names another run is refused, whatever its step, so a sender
  // cannot fill what is kept with rounds that may never come.
  Group group(2, options(4 * 100, false));
  zmq::context_t context;
  zmq::socket_t intruder = hand_sender(context, group.endpoints[0], "7");
  const std::vector<uint32_t> members{0, 1};
  const size_t length = 1001;
  const uint64_t run = 1000;
  constexpr int kSent = 10;
  for (int i = 0; i < kSent; ++i) {
    const ChunkHeader h{PieceKind::kContribution, 7, 2, members_digest(members),
                        {5, 0, run + 1 + static_cast<uint64_t>(i)}, length, 100, 0, 0, 0};
    const auto bytes = encode_header(h);
    intruder.send(zmq::buffer(bytes), zmq::send_flags::sndmore);
    intruder.send(zmq::message_t(), zmq::send_flags::none);
  }
  std::vector<float> c(length, 1.0f), out(length);
  const ExchangeOutcome o = group.peers[0]->exchange({5, 0, run}, members, c, 10, out,
                                                     Clock::now() + milliseconds(1500));
  EXPECT_FALSE(o.ok) << "rank 1 never took part";
  EXPECT_EQ(o.stats.early, 0u);
  EXPECT_EQ(o.stats.refused, static_cast<uint64_t>(kSent));
  EXPECT_NE(o.stats.first_refusal.find("later run"), std::string::npos) << o.stats.first_refusal;
}

TEST(Exchange, APieceOfARunBeforeACoordinatorRestartIsNeverSummedWhateverItsStep) {
  // A coordinator restarted from a checkpoint plans its steps again from
  // there: a piece of the earlier run's step 50 must not wait for the new
  // run's step 50 (as a piece of a later round would).
  Group group(2, options(4 * 100, false));
  const std::vector<uint32_t> members{0, 1};
  const size_t length = 1001;
  const uint64_t first_run = 1000, restarted = 2000;
  const std::vector<float> huge(length, 1e30f);
  std::vector<float> lost(length);
  const auto failed = group.peers[1]->exchange({50, 0, first_run}, members, huge, 99, lost,
                                               Clock::now() + milliseconds(500));
  EXPECT_FALSE(failed.ok);
  const ExchangePlan plan(length, 2, 100);
  const auto c = contributions_for(2, length, 13);
  const RoundRun early = run_round(group, {3, 0, restarted}, members, c, milliseconds(60000));
  expect_rank_order_sum(early, members, c);
  EXPECT_EQ(early.outcomes[0].stats.stale, plan.pieces(0)) << "every piece of the old run dropped";
  EXPECT_EQ(early.outcomes[0].stats.early, 0u);
  const auto d = contributions_for(2, length, 14);
  const RoundRun same_step = run_round(group, {50, 0, restarted}, members, d, milliseconds(60000));
  expect_rank_order_sum(same_step, members, d);
}

TEST(Exchange, APieceFromAConnectionWithoutANameIsRefusedAndTheReportStaysText) {
  // A connection that sets no routing id gets one ZeroMQ makes up (a zero
  // byte and four more): quoted raw in the refusal, it made the member's
  // report a protobuf string that is not UTF-8, which the coordinator
  // cannot parse and drops.
  Group group(2, options(4 * 100, false));
  const std::vector<uint32_t> members{0, 1};
  const size_t length = 1001;
  zmq::context_t context;
  zmq::socket_t stranger = hand_sender(context, group.endpoints[0]);
  ChunkHeader h;
  h.kind = PieceKind::kContribution;
  h.from = 1;
  h.members = 2;
  h.members_digest = members_digest(members);
  h.round = {7, 0};
  h.length = length;
  h.piece_floats = 100;
  const auto header = encode_header(h);
  stranger.send(zmq::buffer(header), zmq::send_flags::sndmore);
  stranger.send(zmq::message_t(), zmq::send_flags::none);
  std::vector<float> result(length);
  const ExchangeOutcome out = group.peers[0]->exchange({7, 0}, members, values(70, length), 10,
                                                       result, Clock::now() + milliseconds(500));
  EXPECT_FALSE(out.ok);
  EXPECT_GE(out.stats.refused, 1u);
  EXPECT_NE(out.stats.first_refusal.find("claims rank 1 from connection '\\x00"),
            std::string::npos)
      << out.stats.first_refusal;
  for (const char c : out.error) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "a byte " << static_cast<int>(c) << " in " << out.error;
  }
  v1::ExchangeReport report;
  report.set_error(out.error);
  v1::ExchangeReport parsed;
  EXPECT_TRUE(parsed.ParseFromString(report.SerializeAsString())) << out.error;
  EXPECT_EQ(parsed.error(), out.error);
}

TEST(Exchange, APieceAsAnotherMemberFromAConnectionWithoutItsSecretIsRefused) {
  // Without CURVE: an intruder connects to rank 0's inbox and sends a piece
  // as rank 1, under rank 1's bare name and under a name with a made-up
  // secret. Rank 0 knows every member's token (as the plans name them), so
  // it takes rank 1's pieces only from a connection carrying rank 1's
  // secret: the intruder's are refused and the round sums what the members
  // contributed. (Once pieces were matched by the routing id alone, and the
  // inbox handed a routing id over to its newest connection: the intruder
  // took rank 1's place, and every round between them failed.)
  Group group(3, options(4 * 100, false));
  std::vector<std::string> tokens;
  for (auto& p : group.peers) tokens.push_back(p->token());
  for (auto& p : group.peers) p->set_member_tokens(tokens);
  const std::vector<uint32_t> members{0, 1, 2};
  const size_t length = 1001;
  const auto warm = contributions_for(3, length, 21);
  expect_rank_order_sum(run_round(group, {1, 0}, members, warm, milliseconds(60000)), members,
                        warm);  // every link is up

  const ExchangePlan plan(length, 3, 100);
  const PieceRange first = plan.piece(0, 0);
  const ChunkHeader h{PieceKind::kContribution,
                      1,
                      3,
                      members_digest(members),
                      {2, 0},
                      length,
                      100,
                      first.offset,
                      first.count,
                      11};
  const auto header = encode_header(h);
  const std::vector<float> forged(first.count, 1e6f);
  zmq::context_t context;
  std::vector<zmq::socket_t> intruders;
  for (const char* id : {"1", "1.1.00112233445566778899aabbccddeeff"}) {
    zmq::socket_t s = hand_sender(context, group.endpoints[0], std::string(id));
    s.send(zmq::buffer(header), zmq::send_flags::sndmore);
    s.send(zmq::buffer(forged), zmq::send_flags::none);
    intruders.push_back(std::move(s));
  }
  std::this_thread::sleep_for(milliseconds(200));  // the pieces are in, kept for round 2

  const auto c = contributions_for(3, length, 22);
  const RoundRun run = run_round(group, {2, 0}, members, c, milliseconds(60000));
  expect_rank_order_sum(run, members, c);
  EXPECT_EQ(run.outcomes[0].stats.refused, 2u);
  EXPECT_NE(run.outcomes[0].stats.first_refusal.find(
                "a piece that claims rank 1 from a connection without its secret"),
            std::string::npos)
      << run.outcomes[0].stats.first_refusal;
}

TEST(Exchange, AFrameLargerThanAPieceClosesItsConnectionWithoutBeingHeld) {
  // Two connections each send rank 0 a 64 MiB frame (pieces are 400 bytes).
  // ZeroMQ reads the frame's size, refuses it and closes the connection
  // before taking the body, so the process's peak memory does not grow by
  // the frames' 128 MiB (the bound below is 32 MiB); the next round is
  // unaffected. The frames come from one untouched mapping (the kernel's
  // zero page): sending them adds nothing to this process's memory either.
  const auto resident_kib = [](const char* field) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field)));
    }
    return -1LL;
  };
  Group group(2, options(4 * 100, false));
  const std::vector<uint32_t> members{0, 1};
  const size_t length = 1001;
  const auto warm = contributions_for(2, length, 31);
  expect_rank_order_sum(run_round(group, {1, 0}, members, warm, milliseconds(60000)), members,
                        warm);
  // The peak from here on: an earlier test in this process may have peaked
  // higher (proc(5): writing 5 to clear_refs resets VmHWM to VmRSS).
  std::ofstream("/proc/self/clear_refs") << "5";
  const long long before = resident_kib("VmRSS:");

  constexpr size_t kHuge = size_t{64} << 20;
  void* zeros = mmap(nullptr, kHuge, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(zeros, MAP_FAILED);
  zmq::context_t context;
  std::vector<zmq::socket_t> senders;
  for (const char* id : {"8", "9"}) {
    zmq::socket_t s = hand_sender(context, group.endpoints[0], std::string(id));
    s.send(zmq::message_t(zeros, kHuge, nullptr, nullptr), zmq::send_flags::none);
    senders.push_back(std::move(s));
  }
  std::this_thread::sleep_for(milliseconds(500));

  const auto c = contributions_for(2, length, 32);
  const RoundRun run = run_round(group, {2, 0}, members, c, milliseconds(60000));
  expect_rank_order_sum(run, members, c);
  const long long peak = resident_kib("VmHWM:");
  ASSERT_GT(before, 0);
  EXPECT_LT(peak - before, 32LL << 10) << "KiB: the frames were held";
  senders.clear();
  munmap(zeros, kHuge);
}

// TCP connections the kernel holds established on local port `port` (the
// accepted ends of a listener's connections), from /proc/net/tcp.
// One reading of /proc/net/tcp. The kernel lists its sockets a bucket at a
// time, so a reading taken while other processes open and close
// connections (the rest of the suite) can miss or repeat one of ours:
// established_on() reads until two readings agree.
size_t established_on_once(uint16_t port) {
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  size_t n = 0;
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    const size_t colon = local.find(':');
    if (colon == std::string::npos) continue;
    if (std::stoul(local.substr(colon + 1), nullptr, 16) == port && state == "01") ++n;
  }
  return n;
}

// The established connections whose local port is `port` (an inbox's).
size_t established_on(uint16_t port) {
  size_t last = established_on_once(port);
  for (int i = 0; i < 100; ++i) {
    const size_t now = established_on_once(port);
    if (now == last) return now;
    last = now;
  }
  return last;
}

TEST(Exchange, AConnectionFloodIsCappedAndTheRoundsGoOn) {
  // 300 connections to rank 0's inbox (a group of 2: its cap is 2 x 2 + 16).
  // Those over the cap are shut down as they are accepted, so the inbox
  // holds the cap's connections, not the flood's (it once held 3,000, and a
  // worker's next reconnect failed with EMFILE); the members' rounds go on.
  Group group(2, options(4 * 100, false));
  const std::vector<uint32_t> members{0, 1};
  const size_t length = 1001;
  const auto warm = contributions_for(2, length, 41);
  expect_rank_order_sum(run_round(group, {1, 0}, members, warm, milliseconds(60000)), members,
                        warm);
  const std::string endpoint = group.endpoints[0];
  const auto port = static_cast<uint16_t>(std::stoul(endpoint.substr(endpoint.rfind(':') + 1)));
  const size_t cap = 2 * 2 + 16;
  // The cap counts connections from the socket monitor's events, which its
  // thread reads after the fact: a round can end before rank 1's "accepted"
  // is counted (seen under load).
  const auto counted = Clock::now() + std::chrono::seconds(20);
  while (group.peers[0]->inbox_connections() < 1 && Clock::now() < counted) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(group.peers[0]->inbox_connections(), 1u) << "rank 1's";
  EXPECT_EQ(established_on(port), 1u);

  constexpr int kFlood = 300;
  zmq::context_t context;
  std::vector<zmq::socket_t> flood;
  for (int i = 0; i < kFlood; ++i) {
    zmq::socket_t s(context, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::reconnect_ivl, 60000);  // shut down, it stays away
    s.connect(endpoint);
    flood.push_back(std::move(s));
  }
  const uint64_t refused = kFlood + 1 - cap;
  const auto until = Clock::now() + std::chrono::seconds(20);
  while ((group.peers[0]->inbox_connections_refused() < refused ||
          group.peers[0]->inbox_connections() > cap || established_on(port) > cap) &&
         Clock::now() < until) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(group.peers[0]->inbox_connections_refused(), refused);
  EXPECT_EQ(group.peers[0]->inbox_connections(), cap);
  EXPECT_EQ(established_on(port), cap) << "the kernel's count of the inbox's connections";

  const auto c = contributions_for(2, length, 42);
  expect_rank_order_sum(run_round(group, {2, 0}, members, c, milliseconds(60000)), members, c);
}

TEST(Exchange, CallerMistakesAreRefusedWithAReason) {
  Group group(2);
  std::vector<float> a(10), b(10), shorter(9);
  const auto later = Clock::now() + milliseconds(1000);
  auto message = [&](const std::vector<uint32_t>& members, std::span<const float> in,
                     std::span<float> out, ExchangeRound round) {
    try {
      (void)group.peers[0]->exchange(round, members, in, 1, out, later);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({1}, a, b, {1, 0}).find("do not include this peer"), std::string::npos);
  EXPECT_NE(message({1, 0}, a, b, {1, 0}).find("ascending"), std::string::npos);
  EXPECT_NE(message({0, 2}, a, b, {1, 0}).find("no endpoint"), std::string::npos);
  EXPECT_NE(message({0}, a, shorter, {1, 0}).find("10 floats, result 9"), std::string::npos);
  EXPECT_EQ(message({0}, a, b, {3, 0}), "accepted");
  EXPECT_NE(message({0}, a, b, {2, 5}).find("rounds must increase"), std::string::npos);
  EXPECT_THROW(ExchangePeer(0, "tcp://127.0.0.1:*", options(6)), std::invalid_argument);
  EXPECT_THROW(ExchangePeer(0, "nonsense://x"), std::runtime_error);
}

// CURVE on the data plane (ExchangeOptions::security): `n` peers with their
// own key pairs; each admits the keys of the ranks in `admitted`.
Group curve_group(const std::vector<CurveKeyPair>& keys, const std::set<uint32_t>& admitted,
                  size_t halving_from = kHalvingFromMembers) {
  Group g(0);
  for (uint32_t r = 0; r < keys.size(); ++r) {
    ExchangeOptions o;
    o.io_threads = 1;
    o.halving_from = halving_from;
    o.security.curve = true;
    o.security.own = keys[r];
    for (uint32_t k = 0; k < keys.size(); ++k) {
      o.member_keys.push_back(keys[k].public_key);
      if (admitted.contains(k)) o.allowed_keys.insert(keys[k].public_key);
    }
    g.peers.push_back(std::make_unique<ExchangePeer>(r, "tcp://127.0.0.1:*", o));
    g.endpoints.push_back(g.peers.back()->endpoint());
  }
  for (auto& p : g.peers) p->connect(g.endpoints);
  return g;
}

TEST(Exchange, WithCurveTheSumIsTheSameBitsAndAKeyNotAdmittedGetsNothingIn) {
  const std::vector<CurveKeyPair> keys = {generate_curve_keypair(), generate_curve_keypair(),
                                          generate_curve_keypair()};
  const std::vector<uint32_t> all{0, 1, 2}, first_two{0, 1};
  const auto c = contributions_for(3, 70'001, 21);
  {
    Group group = curve_group(keys, {0, 1, 2});
    expect_rank_order_sum(run_round(group, {1, 0}, all, c, milliseconds(60000)), all, c);
  }
  // Rank 2's key is in nobody's allow-list: none of its pieces reach ranks
  // 0 and 1, who name it; without it, the two finish the round.
  Group group = curve_group(keys, {0, 1});
  const RoundRun failed = run_round(group, {1, 0}, all, c, milliseconds(1500));
  for (uint32_t i : first_two) {
    EXPECT_FALSE(failed.outcomes[i].ok);
    EXPECT_EQ(failed.outcomes[i].missing_contributions, std::vector<uint32_t>{2})
        << failed.outcomes[i].error;
  }
  const std::vector<std::vector<float>> two{c[0], c[1]};
  expect_rank_order_sum(run_round(group, {1, 1}, first_two, two, milliseconds(60000)), first_two,
                        two);
  // A member key missing for a rank is a caller mistake, named at once.
  ExchangeOptions o;
  o.security.curve = true;
  o.security.own = keys[0];
  ExchangePeer lone(0, "tcp://127.0.0.1:*", o);
  EXPECT_THROW(lone.connect({"", group.endpoints[1]}), std::invalid_argument);
}

TEST(Exchange, WithCurveTheHalvingScheduleGivesTheSameBitsAndAKeyNotAdmittedIsNamedByItsPartners) {
  // Five members on the halving schedule (positions 0 and 1 fold; 0, 2, 3,
  // 4 halve): every link CURVE, the same bits as the tree written out.
  std::vector<CurveKeyPair> keys;
  for (int i = 0; i < 5; ++i) keys.push_back(generate_curve_keypair());
  const std::vector<uint32_t> all{0, 1, 2, 3, 4};
  const auto c = contributions_for(5, 30'001, 23);
  {
    Group group = curve_group(keys, {0, 1, 2, 3, 4}, 1);
    expect_rank_order_sum(run_round(group, {1, 0}, all, c, milliseconds(60000)), all, c, false);
  }
  // Rank 4's key is in nobody's allow-list: its partners (halvers 3 ^ 1 = 2
  // at level 0, rank 3; 3 ^ 2 = 1 at level 1, rank 2) name it.
  Group group = curve_group(keys, {0, 1, 2, 3}, 1);
  const RoundRun failed = run_round(group, {1, 0}, all, c, milliseconds(1500));
  for (uint32_t partner : {2u, 3u}) {
    const auto& missing = failed.outcomes[partner].missing_contributions;
    EXPECT_NE(std::find(missing.begin(), missing.end(), 4u), missing.end())
        << failed.outcomes[partner].error;
  }
}

TEST(Exchange, WithCurveBareConnectionsNeverTakeAMembersPlaceInTheInbox) {
  // An outsider without a key opens 300 bare TCP connections to rank 0's
  // inbox (CURVE on: its cap is 2 x 2 + 16). None of them authenticates, so
  // none holds a member's place: rank 1, reconnecting after the flood (a
  // restart), authenticates at once and the round goes through. (When the
  // cap counted accepted connections, the flood filled it and rank 1 was
  // shut out until ZeroMQ's handshake timeout closed the bare ones.)
  const std::vector<CurveKeyPair> keys = {generate_curve_keypair(), generate_curve_keypair()};
  Group group = curve_group(keys, {0, 1});
  const std::vector<uint32_t> members{0, 1};
  const auto warm = contributions_for(2, 1001, 51);
  expect_rank_order_sum(run_round(group, {1, 0}, members, warm, milliseconds(60000)), members,
                        warm);
  const std::string endpoint = group.endpoints[0];
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port =
      htons(static_cast<uint16_t>(std::stoul(endpoint.substr(endpoint.rfind(':') + 1))));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> flood;
  for (int i = 0; i < 300; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    flood.push_back(fd);
  }
  const size_t cap = 2 * 2 + 16;
  const auto settled = Clock::now() + std::chrono::seconds(20);
  while (group.peers[0]->inbox_connections_refused() < 300 - cap && Clock::now() < settled) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_GE(group.peers[0]->inbox_connections_refused(), 300 - cap);
  EXPECT_LE(group.peers[0]->inbox_authenticated(), 2u) << "rank 1's links, never a bare one";
  // Rank 1 reconnects (its old connections close) and the next round, with
  // a budget well under ZeroMQ's handshake timeout, goes through.
  group.peers[1]->connect(group.endpoints);
  const auto c = contributions_for(2, 1001, 52);
  expect_rank_order_sum(run_round(group, {2, 0}, members, c, milliseconds(5000)), members, c);
  EXPECT_LE(group.peers[0]->inbox_authenticated(), 3u);
  for (int fd : flood) ::close(fd);
}

TEST(Exchange, WithCurveAFirstConnectionBeforeItsKeyIsAdmittedWaitsForIt) {
  // Rank 1 learns the round's keys (its plan arrives) 300 ms after rank 0,
  // done computing, connected: the handshake waits for the admission
  // instead of being refused for good, and the round goes through.
  const std::vector<CurveKeyPair> keys = {generate_curve_keypair(), generate_curve_keypair()};
  Group group = curve_group(keys, {1});  // nobody admits rank 0's key yet
  std::this_thread::sleep_for(milliseconds(300));
  for (auto& p : group.peers) p->set_member_keys({keys[0].public_key, keys[1].public_key});
  const std::vector<uint32_t> all{0, 1};
  const auto c = contributions_for(2, 20'001, 23);
  expect_rank_order_sum(run_round(group, {1, 0}, all, c, milliseconds(60000)), all, c);
}

// Two members; rank 1 reaches rank 0 through a wiretap. Rank 1 contributes
// a text marker (its bytes are ASCII, so finite floats), rank 0 zeros, so
// the sum is the marker's bits. Returns the sum on both and what the tap saw.
std::pair<std::vector<std::vector<float>>, std::string> tapped_round(bool curve,
                                                                     const std::string& marker) {
  const std::vector<CurveKeyPair> keys = {generate_curve_keypair(), generate_curve_keypair()};
  std::vector<std::unique_ptr<ExchangePeer>> peers;
  for (uint32_t r = 0; r < 2; ++r) {
    ExchangeOptions o;
    o.io_threads = 1;
    o.security.curve = curve;
    o.security.own = keys[r];
    peers.push_back(std::make_unique<ExchangePeer>(r, "tcp://127.0.0.1:*", o));
    peers.back()->set_member_keys({keys[0].public_key, keys[1].public_key});
  }
  const std::string e0 = peers[0]->endpoint();
  testing::TcpTap tap(static_cast<uint16_t>(std::stoi(e0.substr(e0.rfind(':') + 1))));
  peers[0]->connect({e0, peers[1]->endpoint()});
  peers[1]->connect({tap.endpoint(), peers[1]->endpoint()});

  std::string text;
  while (text.size() < 64 * 1024) text += marker;
  std::vector<float> mark(text.size() / sizeof(float));
  std::memcpy(mark.data(), text.data(), mark.size() * sizeof(float));
  const std::vector<std::vector<float>> c = {std::vector<float>(mark.size(), 0.0f), mark};
  Group group(0);
  group.peers = std::move(peers);
  const std::vector<uint32_t> all{0, 1};
  const RoundRun run = run_round(group, {1, 0}, all, c, milliseconds(60000));
  for (const ExchangeOutcome& o : run.outcomes) EXPECT_TRUE(o.ok) << o.error;
  EXPECT_TRUE(same_bits(run.results[0], mark));
  EXPECT_TRUE(same_bits(run.results[1], mark));
  group.peers.clear();  // closed before the tap
  return {run.results, tap.captured()};
}

TEST(Exchange, AWiretapOnALinkReadsTheGradientsInPlainTextAndNothingWithCurve) {
  const std::string marker = "exchange-link-plaintext-marker-0123456789;";
  const auto plain = tapped_round(false, marker);
  const auto secured = tapped_round(true, marker);
  EXPECT_EQ(plain.first, secured.first);
  // Rank 1 sent rank 0's half (32 KiB of marker) through the tap.
  EXPECT_GT(secured.second.size(), size_t{32 * 1024});
  EXPECT_NE(plain.second.find(marker), std::string::npos) << "the tap should read plain pieces";
  EXPECT_EQ(secured.second.find(marker), std::string::npos) << "CURVE traffic holds the marker";
  EXPECT_EQ(secured.second.find(marker.substr(0, 16)), std::string::npos);
}

TEST(Exchange, EachRoundAdmitsExactlyItsMembersKeys) {
  // Ranks 0 and 1 first know rank 2 under an old key; the peer at rank 2
  // holds a new one, so it gets nothing in until they learn the new key.
  const CurveKeyPair old_key = generate_curve_keypair();
  const std::vector<CurveKeyPair> keys = {generate_curve_keypair(), generate_curve_keypair(),
                                          generate_curve_keypair()};
  Group group = curve_group(keys, {0, 1, 2});
  const std::vector<std::string> stale = {keys[0].public_key, keys[1].public_key,
                                          old_key.public_key};
  group.peers[0]->set_member_keys(stale);
  group.peers[1]->set_member_keys(stale);
  // Rank 2's outbox was made for the new keys (curve_group); reconnecting
  // 0 and 1 drops their admitted connections and makes them authenticate
  // rank 2 by the old key, which it cannot prove.
  group.peers[0]->connect(group.endpoints);
  group.peers[1]->connect(group.endpoints);
  group.peers[2]->connect(group.endpoints);
  const std::vector<uint32_t> all{0, 1, 2};
  const auto c = contributions_for(3, 10'001, 5);
  const RoundRun refused = run_round(group, {1, 0}, all, c, milliseconds(1500));
  for (uint32_t i : {0u, 1u}) {
    EXPECT_FALSE(refused.outcomes[i].ok);
    const std::vector<uint32_t> suspects = refused.outcomes[i].suspects();
    EXPECT_NE(std::find(suspects.begin(), suspects.end(), 2u), suspects.end())
        << refused.outcomes[i].error;
  }
  // The next round's plan names rank 2's new key: the round goes through.
  const std::vector<std::string> fresh = {keys[0].public_key, keys[1].public_key,
                                          keys[2].public_key};
  for (auto& p : group.peers) {
    p->set_member_keys(fresh);
    p->connect(group.endpoints);
  }
  expect_rank_order_sum(run_round(group, {2, 0}, all, c, milliseconds(60000)), all, c);
}

TEST(Exchange, WithCurveAMemberCannotSendAsAnother) {
  // Rank 2's key is admitted, but its peer claims to be rank 1 (whose key
  // is another): rank 0 refuses every piece of it and blames rank 1.
  const std::vector<CurveKeyPair> keys = {generate_curve_keypair(), generate_curve_keypair(),
                                          generate_curve_keypair()};
  Group group = curve_group(keys, {0, 1, 2});
  // The real rank 1 goes, so that its connection (same routing id) cannot
  // take the impostor's over.
  group.peers[1].reset();
  ExchangeOptions o;
  o.io_threads = 1;
  o.security.curve = true;
  o.security.own = keys[2];
  for (const CurveKeyPair& k : keys) o.member_keys.push_back(k.public_key);
  ExchangePeer impostor(1, "tcp://127.0.0.1:*", o);
  impostor.connect({group.endpoints[0], "", ""});
  const std::vector<uint32_t> two{0, 1};
  const auto c = contributions_for(2, 4'001, 9);
  const auto deadline = Clock::now() + milliseconds(1500);
  std::vector<float> forged(c[1].size());
  std::thread t([&] { (void)impostor.exchange({1, 0}, two, c[1], 11, forged, deadline); });
  std::vector<float> result(c[0].size());
  const ExchangeOutcome out = group.peers[0]->exchange({1, 0}, two, c[0], 10, result, deadline);
  t.join();
  EXPECT_FALSE(out.ok);
  EXPECT_GT(out.stats.refused, 0u) << out.error << " received " << out.stats.pieces_received
                                   << " stale " << out.stats.stale << " early " << out.stats.early;
  EXPECT_NE(out.stats.first_refusal.find("authenticated with another key"), std::string::npos)
      << out.stats.first_refusal;
  EXPECT_EQ(out.missing_contributions, std::vector<uint32_t>{1}) << out.error;
}

}  // namespace
}  // namespace dctrain
