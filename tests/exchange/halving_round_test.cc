// The halving schedule without a socket: HalvingRounds
// (exchange/halving_round.h) joined by a queue in memory that delivers their
// pieces in an order drawn from a seed (tests/exchange/round_harness.h).
// Every member ends with the tree sum of comm/rank_order_sum.h, bit for bit,
// for 1 to 33 members (powers of two and not), buffers longer and shorter
// than the member count, whatever the order of arrival; each member sends to
// at most log2(N) + 1 others, and about 2 log2(N) messages when the buffer
// fits a piece; a member that sends nothing is named by its
// partners, and the members behind them name the partner they waited for;
// pieces of the wrong schedule, stage or sender are refused or conflicts.
#include "exchange/halving_round.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/exchange/round_harness.h"
#include "tests/testing/tree_sum.h"

namespace dctrain {
namespace {

using testing::InFlight;
using testing::Mesh;

Mesh halving(size_t n, size_t length, size_t piece_floats) {
  return Mesh(n, length, piece_floats, ExchangeSchedule::kHalving);
}

TEST(HalvingLayout, FoldsTheFirstPairsAndHalvesAPowerOfTwo) {
  const HalvingLayout six(6);  // P = 4, extra 2: positions 0/1 and 2/3 fold
  EXPECT_EQ(six.halvers, 4u);
  EXPECT_EQ(six.extra, 2u);
  EXPECT_EQ(six.levels, 2u);
  EXPECT_EQ(six.halver(0), 0u);
  EXPECT_EQ(six.halver(1), std::nullopt);
  EXPECT_EQ(six.halver(2), 1u);
  EXPECT_EQ(six.halver(4), 2u);
  EXPECT_EQ(six.halver(5), 3u);
  EXPECT_EQ(six.position(3), 5u);
  // Halver 1 (position 2): folded member 3, partners halver 0 (position 0)
  // at level 0 and halver 3 (position 5) at level 1.
  const auto partners = six.partners(2);
  ASSERT_EQ(partners.size(), 3u);
  EXPECT_EQ(partners[0], 3u);
  EXPECT_EQ(partners[1], 0u);
  EXPECT_EQ(partners[2], 5u);
  EXPECT_EQ(six.partners(3)[0], 2u);
  EXPECT_EQ(six.partners(3)[1], std::nullopt);
  // Blocks: halver h keeps the half on the side of bit j of h at level j.
  EXPECT_EQ(six.range_first(1, 1), 2u);  // bit 0 set: the upper half [2, 4)
  EXPECT_EQ(six.range_first(1, 2), 2u);  // bit 1 clear: then [2, 3)
  EXPECT_EQ(six.range_first(2, 2), 1u);
}

TEST(HalvingRound, EveryMemberEndsWithTheTreeSumBitForBitWhateverTheOrderOfArrival) {
  for (size_t n : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u, 12u, 16u, 17u, 33u}) {
    // Several pieces per block and a short last one; and a buffer shorter
    // than the member count (empty blocks).
    for (const auto& [length, piece] : std::vector<std::pair<size_t, size_t>>{{1000, 16}, {5, 2}}) {
      for (uint64_t seed : {1u, 2u}) {
        SCOPED_TRACE("members " + std::to_string(n) + ", length " + std::to_string(length) +
                     ", seed " + std::to_string(seed));
        Mesh mesh = halving(n, length, piece);
        mesh.run(seed);
        const std::vector<float> expected = testing::tree_sum(mesh.contributions);
        uint64_t samples = 0;
        for (uint32_t rank : mesh.ranks()) samples += 10 + rank;
        std::vector<std::string> first_digests;
        for (size_t i = 0; i < n; ++i) {
          RoundSchedule& r = *mesh.rounds[i];
          ASSERT_TRUE(r.complete()) << "member " << i;
          EXPECT_TRUE(r.conflict().empty()) << r.conflict();
          EXPECT_TRUE(r.usable());
          EXPECT_EQ(std::memcmp(mesh.results[i].data(), expected.data(), length * 4), 0)
              << "member " << i << " holds other bits than the tree sum";
          const std::vector<std::string> digests = r.digests();
          EXPECT_EQ(digests.size(), n);  // the direct schedule's shards, for the coordinator
          if (i == 0) first_digests = digests;
          EXPECT_EQ(digests, first_digests) << "member " << i;
          ExchangeOutcome out;
          out.complete = true;
          r.settle(out);
          EXPECT_TRUE(out.complete);
          EXPECT_EQ(out.samples, samples) << "member " << i;
          EXPECT_TRUE(out.missing_contributions.empty());
          EXPECT_TRUE(out.missing_results.empty());
          EXPECT_TRUE(out.conflicting.empty());
        }
        EXPECT_TRUE(mesh.refusals.empty()) << mesh.refusals.front();
      }
    }
  }
}

// Of a round's members: the most others one sent to, and the most messages
// one sent.
std::pair<size_t, size_t> most_sent(const Mesh& mesh) {
  std::map<uint32_t, std::set<uint32_t>> talks_to;
  std::map<uint32_t, size_t> messages;
  for (const auto& [h, piece] : mesh.sent()) {
    talks_to[h.from].insert(piece.to);
    ++messages[h.from];
  }
  size_t most_peers = 0, most_messages = 0;
  for (const auto& [rank, to] : talks_to) most_peers = std::max(most_peers, to.size());
  for (const auto& [rank, m] : messages) most_messages = std::max(most_messages, m);
  return {most_peers, most_messages};
}

TEST(HalvingRound, EachMemberSendsToAtMostLogNPlusOneOthersAndTwiceLogNMessages) {
  for (size_t n : {8u, 13u, 32u}) {
    SCOPED_TRACE("members " + std::to_string(n));
    const size_t levels = static_cast<size_t>(std::countr_zero(std::bit_floor(n)));
    for (const ExchangeSchedule schedule :
         {ExchangeSchedule::kHalving, ExchangeSchedule::kDirect}) {
      // A buffer that fits one piece: a level's half leaves as one message
      // however many blocks it spans.
      Mesh mesh(n, 4096, 4096, schedule);
      mesh.run(3);
      const auto [most_peers, most_messages] = most_sent(mesh);
      if (schedule == ExchangeSchedule::kHalving) {
        EXPECT_LE(most_peers, levels + 1);
        EXPECT_LE(most_messages, 2 * levels + 2);
      } else {
        EXPECT_EQ(most_peers, n - 1);
        EXPECT_EQ(most_messages, 2 * (n - 1));
      }
    }
  }
}

TEST(HalvingRound, PiecesOfABufferLargerThanAPieceStillGoToLogNPlusOnePeers) {
  for (size_t n : {8u, 13u, 32u}) {
    SCOPED_TRACE("members " + std::to_string(n));
    const size_t bound = static_cast<size_t>(std::countr_zero(std::bit_floor(n))) + 1;
    for (const ExchangeSchedule schedule :
         {ExchangeSchedule::kHalving, ExchangeSchedule::kDirect}) {
      Mesh mesh(n, 4096, 64, schedule);
      mesh.run(3);
      const auto [most_peers, most_messages] = most_sent(mesh);
      if (schedule == ExchangeSchedule::kHalving) {
        EXPECT_LE(most_peers, bound);
        // 4096 floats in pieces of 64: at most the buffer's 64 pieces each
        // way per level, and once more to a folded member.
        EXPECT_LE(most_messages, 64 * (2 * bound));
      } else {
        EXPECT_EQ(most_peers, n - 1);
      }
    }
  }
}

TEST(HalvingRound, AMemberThatSendsNothingIsNamedByItsPartnersAndTheOthersNameWhomTheyWaitedFor) {
  // 8 members, ranks 0, 2, ..., 14 (positions 0..7, all halvers); position 0
  // (rank 0) is silent. Its partners are positions 1, 2 and 4: they lack its
  // pieces. The others lack a partner's pieces, a partner that itself waited.
  Mesh mesh = halving(8, 256, 16);
  mesh.silent = {0};
  mesh.run(5);
  for (uint32_t rank : mesh.ranks()) {
    if (rank == 0) continue;
    RoundSchedule& r = mesh.at_rank(rank);
    EXPECT_FALSE(r.complete()) << "rank " << rank;
    ExchangeOutcome out;
    r.settle(out);
    const size_t position = rank / 2;
    const bool partner = position == 1 || position == 2 || position == 4;
    EXPECT_EQ(std::find(out.missing_contributions.begin(), out.missing_contributions.end(), 0u) !=
                  out.missing_contributions.end(),
              partner)
        << "rank " << rank;
    EXPECT_FALSE(out.missing_contributions.empty() && out.missing_results.empty())
        << "rank " << rank << " names nobody";
  }
  const auto [missing, of] = mesh.at_rank(2).contribution_pieces_missing(0);
  EXPECT_EQ(missing, of);
  EXPECT_GT(of, 0u);
}

TEST(HalvingRound, AFoldedMemberThatSendsNothingIsNamedByItsHalverAlone) {
  // 6 members: positions 0/1 and 2/3 fold. Position 3 (rank 6) is silent:
  // its halver (position 2) lacks its contribution and cannot start; the
  // halvers that wait for position 2 name position 2.
  Mesh mesh = halving(6, 300, 32);
  mesh.silent = {6};
  mesh.run(2);
  ExchangeOutcome halver;
  mesh.at_rank(4).settle(halver);
  EXPECT_EQ(halver.missing_contributions.front(), 6u);
  ExchangeOutcome other;
  mesh.at_rank(0).settle(other);  // its level-0 partner is position 2
  EXPECT_EQ(other.missing_contributions, std::vector<uint32_t>{4});
}

TEST(HalvingRound, PiecesOfAnotherScheduleStageOrSenderAreRefusedOrConflicts) {
  Mesh mesh = halving(4, 200, 50);
  mesh.run(9);
  ASSERT_TRUE(mesh.at_rank(0).complete());
  // Position 0's partners: position 1 (rank 2) at level 0, position 2
  // (rank 4) at level 1; position 3 (rank 6) is none.
  mesh.deliver(mesh.copy_of_sent(2, 0));
  ASSERT_EQ(mesh.refusals.size(), 1u);
  EXPECT_NE(mesh.refusals[0].find("a second copy of rank 2's"), std::string::npos)
      << mesh.refusals[0];

  InFlight stranger = mesh.copy_of_sent(6, 4);
  stranger.to = 0;
  mesh.deliver(std::move(stranger));
  ASSERT_EQ(mesh.refusals.size(), 2u);
  EXPECT_NE(mesh.refusals[1].find("no partner of this member"), std::string::npos)
      << mesh.refusals[1];
  EXPECT_TRUE(mesh.at_rank(0).conflict().empty());

  auto rewritten = [&](uint32_t from, uint32_t to, auto change) {
    InFlight piece = mesh.copy_of_sent(from, to);
    std::string why;
    ChunkHeader h = *parse_header(piece.header, why);
    change(h);
    const auto bytes = encode_header(h);
    piece.header.assign(bytes.begin(), bytes.end());
    return piece;
  };
  mesh.deliver(rewritten(4, 0, [](ChunkHeader& h) { h.stage = 1; }));  // level 0 is rank 2's
  EXPECT_EQ(mesh.at_rank(0).conflict().rfind("rank 4: sends pieces of stage 1", 0), 0u)
      << mesh.at_rank(0).conflict();
  Mesh second = halving(4, 200, 50);
  second.run(9);
  second.deliver(rewritten(2, 0, [](ChunkHeader& h) {
    h.kind = PieceKind::kContribution;
    h.stage = 0;
  }));
  EXPECT_EQ(second.at_rank(0).conflict().rfind("rank 2: runs the direct schedule", 0), 0u)
      << second.at_rank(0).conflict();
  ExchangeOutcome out;
  second.at_rank(0).settle(out);
  EXPECT_EQ(out.conflicting, std::vector<uint32_t>{2});
}

}  // namespace
}  // namespace dctrain
