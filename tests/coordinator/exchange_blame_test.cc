// Whom a failed exchange round takes out (coordinator/planes/exchange_blame.h),
// on the reports seen in runs: a member with a slow link, a dead member,
// and complaints that cannot tell one end of a link from the other; on the
// halving schedule, the complaints that follow from a member's own wait.
#include "coordinator/planes/exchange_blame.h"

#include <gtest/gtest.h>

namespace dctrain {
namespace {

using Ranks = std::vector<uint32_t>;

RoundReport failed(uint32_t rank, Ranks missing_contributions, Ranks missing_sums) {
  RoundReport r;
  r.rank = rank;
  r.missing_contributions = std::move(missing_contributions);
  r.missing_sums = std::move(missing_sums);
  // As ExchangeOutcome::suspects() names them.
  r.suspects = r.missing_contributions.empty() ? r.missing_sums : r.missing_contributions;
  return r;
}

RoundReport succeeded(uint32_t rank) {
  RoundReport r;
  r.rank = rank;
  r.ok = true;
  return r;
}

TEST(ExchangeBlame, AMemberEveryComplaintLeadsToIsTheOnlyOneOut) {
  // Rank 2's link is slow: neither got its contribution, it got neither's.
  const RoundBlame b = blame_exchange_round(
      {failed(0, {2}, {2}), failed(1, {2}, {2}), failed(2, {0, 1}, {0, 1})}, {});
  EXPECT_EQ(b.out, Ranks({2}));
  // Four members: the same with one more.
  EXPECT_EQ(blame_exchange_round({failed(0, {3}, {3}), failed(1, {3}, {3}), failed(2, {3}, {3}),
                                  failed(3, {}, {0, 1, 2})},
                                 {})
                .out,
            Ranks({3}));
}

TEST(ExchangeBlame, AMissingSumIsNoEvidenceAgainstAnOwnerThatLackedAContribution) {
  // Seen under load with a slow link on rank 2: rank 0 got rank 2's
  // contribution in time, rank 1 did not, so rank 1 could not sum its shard
  // and both others miss rank 1's sum. Blaming the sums would take out rank
  // 1 alone, and the redo would hold the slow link again. One link failed
  // (2 to 1), and nothing says which end: both are out.
  const RoundBlame b =
      blame_exchange_round({failed(0, {}, {1}), failed(1, {2}, {2}), failed(2, {}, {1})}, {});
  EXPECT_EQ(b.out, Ranks({1, 2}));
  ASSERT_EQ(b.links.size(), 1u);
  EXPECT_EQ(b.links[0], std::make_pair(1u, 2u));
  // Also seen: the slow member lacked rank 0's contribution (its downlink),
  // the others its sum. Blaming by the first report took out rank 0 alone.
  EXPECT_EQ(
      blame_exchange_round({failed(0, {}, {2}), failed(1, {}, {2}), failed(2, {0}, {0})}, {}).out,
      Ranks({0, 2}));
}

TEST(ExchangeBlame, TheLinksOfASilentMemberAreItsOwn) {
  // Rank 2 died after sending its contributions: the others miss its sum.
  EXPECT_TRUE(blame_exchange_round({failed(0, {}, {2}), failed(1, {}, {2})}, {2}).out.empty());
  // It died after sending its sum to rank 0 only.
  EXPECT_TRUE(blame_exchange_round({succeeded(0), failed(1, {}, {2})}, {2}).out.empty());
  // A member that lacks a silent member's contribution is not at fault either.
  EXPECT_TRUE(blame_exchange_round({failed(0, {2}, {2}), failed(1, {2}, {1, 2})}, {2}).out.empty());
}

TEST(ExchangeBlame, MembersMissingEachOthersSumsAreBothOut) {
  // Every contribution arrived everywhere; rank 0 and rank 1 lack each
  // other's sums: either link direction may have failed.
  EXPECT_EQ(blame_exchange_round({failed(0, {}, {1}), failed(1, {}, {0}), succeeded(2)}, {}).out,
            Ranks({0, 1}));
  // A sum missing from an owner that had everything (it reported ok) is
  // evidence against the link between them.
  EXPECT_EQ(blame_exchange_round({succeeded(0), failed(1, {}, {0}), succeeded(2)}, {}).out,
            Ranks({0, 1}));
}

TEST(ExchangeBlame, ARoundWithoutComplaintsTakesNobodyOut) {
  EXPECT_TRUE(blame_exchange_round({succeeded(0), succeeded(1)}, {}).out.empty());
  EXPECT_TRUE(blame_exchange_round({}, {0, 1}).out.empty());
  // A member naming itself is ignored.
  EXPECT_TRUE(blame_exchange_round({failed(0, {0}, {})}, {}).out.empty());
}

TEST(ExchangeBlame, TwoIndependentFailedLinksTakeOutBothEndsOfEach) {
  // 0-1 and 2-3 failed, each seen from both ends with a contribution
  // missing: the smallest sets are one member of each pair, in four ways.
  EXPECT_EQ(
      blame_exchange_round(
          {failed(0, {1}, {}), failed(1, {0}, {}), failed(2, {3}, {}), failed(3, {2}, {})}, {})
          .out,
      Ranks({0, 1, 2, 3}));
  // With rank 1 in both failed links, it is the one.
  EXPECT_EQ(blame_exchange_round(
                {failed(0, {1}, {}), failed(1, {0, 2}, {}), failed(2, {1}, {}), succeeded(3)}, {})
                .out,
            Ranks({1}));
}

TEST(ExchangeBlame, OneLiarsComplaintAgainstAMemberOthersHeardInFullStrikesTheLiar) {
  // Rank 3 says it lacked rank 0's contribution; rank 0 lacked nothing,
  // ranks 1 and 2 got all of rank 0's parts.
  const RoundBlame b =
      blame_exchange_round({succeeded(0), succeeded(1), succeeded(2), failed(3, {0}, {})}, {});
  EXPECT_EQ(b.out, Ranks({0, 3})) << "one link: both ends out of the step";
  EXPECT_EQ(b.struck, Ranks({3}));
  EXPECT_EQ(b.unfounded, Ranks({3}));
}

TEST(ExchangeBlame, TwoCollidersCannotGetAMemberStruckThatAThirdHeardInFull) {
  // Ranks 2 and 3 both say they lacked rank 0's parts; rank 1 got them all.
  RoundBlame b = blame_exchange_round(
      {succeeded(0), succeeded(1), failed(2, {0}, {}), failed(3, {0}, {})}, {});
  EXPECT_EQ(b.out, Ranks({0, 2, 3}));
  EXPECT_EQ(b.struck, Ranks({2, 3})) << "their complaints are contradicted";
  // The same, withholding their own parts from rank 0 so that it blames
  // them back: nobody is struck (rank 1 heard from rank 0 in full).
  b = blame_exchange_round(
      {failed(0, {2, 3}, {}), succeeded(1), failed(2, {0}, {}), failed(3, {0}, {})}, {});
  EXPECT_EQ(b.out, Ranks({0}));
  EXPECT_TRUE(b.struck.empty());
}

TEST(ExchangeBlame, AMemberEveryOtherMemberLackedIsStruck) {
  // A member that ended its round at once (a liar, or a dead exchange
  // port): every other member lacks its parts, nobody heard it in full.
  RoundBlame b = blame_exchange_round(
      {failed(0, {3}, {3}), failed(1, {3}, {3}), failed(2, {3}, {3}), failed(3, {}, {})}, {});
  EXPECT_EQ(b.out, Ranks({3}));
  EXPECT_EQ(b.struck, Ranks({3}));
  // Its inbox unreachable: it lacks every contribution, the others its sum.
  b = blame_exchange_round({failed(0, {}, {2}), failed(1, {}, {2}), failed(2, {0, 1}, {0, 1})}, {});
  EXPECT_EQ(b.out, Ranks({2}));
  EXPECT_EQ(b.struck, Ranks({2}));
  // One link between two members, which a third cannot judge: nobody.
  b = blame_exchange_round({failed(0, {1}, {}), failed(1, {0}, {}), succeeded(2)}, {});
  EXPECT_EQ(b.out, Ranks({0, 1}));
  EXPECT_TRUE(b.struck.empty());
}

// Eight members on the halving schedule (ranks 0-7 = positions = halvers):
// partners at level 0 differ in bit 0, at level 1 in bit 1, at level 2 in
// bit 2.
const Ranks kEight{0, 1, 2, 3, 4, 5, 6, 7};

TEST(ExchangeBlame, OnTheHalvingScheduleADeadMemberTakesOutNobodyElse) {
  // Rank 0 is dead (silent). Its partners 1, 2 and 4 lack its pieces; the
  // others lack pieces of partners that waited on an earlier stage: rank 3
  // lacks rank 1's level-1 partial (rank 1 waited at level 0), rank 7 rank
  // 3's at level 2 (rank 3 waited at level 1) and rank 3 rank 7's sum.
  const RoundBlame b = blame_exchange_round(
      {failed(1, {0}, {0}), failed(2, {0}, {0}), failed(4, {0}, {0}), failed(3, {1}, {7}),
       failed(5, {1}, {}), failed(6, {2}, {}), failed(7, {3}, {3})},
      {0}, kEight);
  EXPECT_TRUE(b.out.empty()) << b.out.size();
  EXPECT_TRUE(b.struck.empty());
  // The direct schedule's rule on the same reports would take out members
  // that only waited.
  EXPECT_FALSE(blame_exchange_round({failed(1, {0}, {0}), failed(2, {0}, {0}), failed(4, {0}, {0}),
                                     failed(3, {1}, {7}), failed(5, {1}, {}), failed(6, {2}, {}),
                                     failed(7, {3}, {3})},
                                    {0})
                   .out.empty());
}

TEST(ExchangeBlame, OnTheHalvingScheduleAFailedLinkTakesOutItsTwoEndsAlone) {
  // The link between ranks 0 and 2 (partners at level 1) failed both ways.
  // Everyone behind them waited on them later: ranks 4 and 6 for their
  // level-2 partials; 1 and 3 for their sums at level 0; 5 and 7 for the
  // sums of 4 and 6, which could not finish their blocks.
  const RoundBlame b = blame_exchange_round(
      {failed(0, {2}, {2}), failed(2, {0}, {0}), failed(1, {}, {0}), failed(3, {}, {2}),
       failed(4, {0}, {0}), failed(6, {2}, {2}), failed(5, {}, {4}), failed(7, {}, {6})},
      {}, kEight);
  EXPECT_EQ(b.out, Ranks({0, 2}));
  // A one-way failure (rank 2's pieces never reached rank 0), which rank
  // 0's other partners cannot judge: both ends out, nobody struck.
  const RoundBlame one_way = blame_exchange_round(
      {failed(0, {2}, {}), succeeded(2), failed(1, {}, {}), failed(4, {0}, {})}, {}, kEight);
  EXPECT_EQ(one_way.out, Ranks({0, 2}));
  EXPECT_TRUE(one_way.struck.empty());
}

}  // namespace
}  // namespace dctrain
