// The exchange's round without a socket: MeshRounds (exchange/mesh_round.h)
// joined by a queue in memory that delivers their pieces, headers encoded
// and parsed as on the wire, in an order drawn from a seed. Every member
// ends with the rank-order sum, bit for bit, whatever the order of arrival
// and the number of members; a member that sends nothing is named missing
// by every other; a second copy of a piece is refused, and a piece of
// another length is a conflict that names its sender, as is an owner whose
// summed pieces claim another total than the members' counts.
#include "exchange/mesh_round.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/random.h"
#include "tests/exchange/round_harness.h"
#include "tests/testing/tree_sum.h"

namespace dctrain {
namespace {

using Clock = std::chrono::steady_clock;
using testing::InFlight;
using testing::Mesh;

// The tree over the members' contributions in rank order
// (comm/rank_order_sum.h), written out.
std::vector<float> rank_order_sum(const std::vector<std::vector<float>>& contributions) {
  return testing::tree_sum(contributions);
}

TEST(MeshRound, EveryMemberEndsWithTheRankOrderSumBitForBitWhateverTheOrderOfArrival) {
  for (size_t n : {1u, 2u, 3u, 5u, 8u}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("members " + std::to_string(n) + ", seed " + std::to_string(seed));
      Mesh mesh(n, 1000, 64);  // several pieces per shard, and a short last one
      mesh.run(seed);
      const std::vector<float> expected = rank_order_sum(mesh.contributions);
      uint64_t samples = 0;
      for (uint32_t rank : mesh.ranks()) samples += 10 + rank;
      std::vector<std::vector<std::string>> digests;
      for (size_t i = 0; i < n; ++i) {
        RoundSchedule& r = *mesh.rounds[i];
        ASSERT_TRUE(r.complete());
        EXPECT_TRUE(r.conflict().empty()) << r.conflict();
        EXPECT_TRUE(r.usable());
        EXPECT_EQ(std::memcmp(mesh.results[i].data(), expected.data(), expected.size() * 4), 0)
            << "member " << i << " holds other bits than the rank-order sum";
        digests.push_back(r.digests());
        EXPECT_EQ(digests.back().size(), n);
        EXPECT_EQ(digests.back(), digests.front()) << "member " << i;
        ExchangeOutcome out;
        out.complete = true;
        r.settle(out);
        EXPECT_TRUE(out.complete);
        EXPECT_EQ(out.samples, samples);
        EXPECT_TRUE(out.missing_contributions.empty());
        EXPECT_TRUE(out.missing_results.empty());
      }
      EXPECT_TRUE(mesh.refusals.empty());
    }
  }
}

TEST(MeshRound, AMemberThatSendsNothingIsNamedMissingByEveryOther) {
  Mesh mesh(4, 300, 32);
  mesh.silent = {4};
  mesh.run(5);
  for (uint32_t rank : mesh.ranks()) {
    if (rank == 4) continue;
    RoundSchedule& r = mesh.at_rank(rank);
    EXPECT_FALSE(r.complete()) << "rank " << rank;
    ExchangeOutcome out;
    r.settle(out);
    EXPECT_EQ(out.missing_contributions, std::vector<uint32_t>{4}) << "rank " << rank;
    // No owner could sum its shard without rank 4's piece, so every sum is
    // missing; rank 4 is the one whose contribution is missing.
    EXPECT_FALSE(out.missing_results.empty());
    const auto [missing, of] = r.contribution_pieces_missing(4);
    EXPECT_EQ(missing, of);
  }
}

TEST(MeshRound, ASecondCopyIsRefusedAndAPieceOfAnotherLengthIsAConflictNamingItsSender) {
  Mesh mesh(3, 200, 50);
  mesh.run(9);
  ASSERT_TRUE(mesh.at_rank(0).complete());
  mesh.deliver(mesh.copy_of_sent(2, 0));
  ASSERT_EQ(mesh.refusals.size(), 1u);
  EXPECT_NE(mesh.refusals[0].find("a second copy of rank 2's"), std::string::npos)
      << mesh.refusals[0];
  EXPECT_TRUE(mesh.at_rank(0).conflict().empty());

  InFlight other = mesh.copy_of_sent(4, 0);
  std::string why;
  ChunkHeader h = *parse_header(other.header, why);
  h.length += 1;
  const auto bytes = encode_header(h);
  other.header.assign(bytes.begin(), bytes.end());
  mesh.deliver(std::move(other));
  EXPECT_EQ(mesh.refusals.size(), 1u);
  EXPECT_EQ(mesh.at_rank(0).conflict().rfind("rank 4: exchanges 201 floats", 0), 0u)
      << mesh.at_rank(0).conflict();
  ExchangeOutcome out;
  mesh.at_rank(0).settle(out);
  EXPECT_EQ(out.conflicting, std::vector<uint32_t>{4});
}

TEST(MeshRound, AnOwnerWhoseTotalIsNotTheMembersCountsIsAConflictAndTheSumIncomplete) {
  Mesh mesh(3, 200, 50);
  mesh.overcounting_owner = 2;
  mesh.run(4);
  for (uint32_t rank : {0u, 4u}) {
    RoundSchedule& r = mesh.at_rank(rank);
    ASSERT_TRUE(r.complete()) << "every piece arrived";
    ExchangeOutcome out;
    out.complete = true;
    r.settle(out);
    EXPECT_FALSE(out.complete) << "rank " << rank;
    EXPECT_EQ(out.conflicting, std::vector<uint32_t>{2}) << "rank " << rank;
    EXPECT_EQ(r.conflict().rfind("rank 2: summed 37 samples, this peer counts 36", 0), 0u)
        << r.conflict();
  }
}

}  // namespace
}  // namespace dctrain
