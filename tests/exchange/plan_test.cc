// The cut of a buffer into shards and pieces, and the piece header: every
// float in exactly one piece, shards balanced, empty shards still one
// (empty) piece; headers round-trip and garbage is refused with a reason.
#include "exchange/plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "exchange/chunk.h"

namespace dctrain {
namespace {

TEST(ExchangePlan, EveryFloatLiesInExactlyOnePieceOfABalancedShard) {
  for (uint64_t length : {0ull, 1ull, 2ull, 3ull, 6ull, 7ull, 13ull, 1000ull, 1000003ull}) {
    for (size_t members : {1u, 2u, 3u, 4u, 7u}) {
      for (uint64_t piece : {1ull, 7ull, 64ull, 262144ull}) {
        const ExchangePlan plan(length, members, piece);
        std::vector<int> covered(length, 0);
        uint64_t smallest = length, largest = 0;
        for (size_t s = 0; s < members; ++s) {
          const uint64_t begin = plan.shard_begin(s), end = plan.shard_end(s);
          ASSERT_LE(begin, end);
          smallest = std::min(smallest, end - begin);
          largest = std::max(largest, end - begin);
          ASSERT_GE(plan.pieces(s), 1u);
          uint64_t next = begin;
          for (size_t k = 0; k < plan.pieces(s); ++k) {
            const PieceRange p = plan.piece(s, k);
            ASSERT_EQ(p.offset, next) << "pieces of a shard are contiguous";
            ASSERT_LE(p.count, piece);
            if (end > begin) {
              ASSERT_GT(p.count, 0u) << "only an empty shard has an empty piece";
            }
            for (uint64_t i = p.offset; i < p.offset + p.count; ++i) ++covered[i];
            ASSERT_EQ(plan.piece_at(s, p.offset, p.count), std::optional<size_t>(k));
            next = p.offset + p.count;
          }
          ASSERT_EQ(next, end);
        }
        EXPECT_EQ(plan.shard_begin(0), 0u);
        EXPECT_EQ(plan.shard_end(members - 1), length);
        EXPECT_LE(largest - smallest, 1u) << "shards differ by at most one float";
        for (uint64_t i = 0; i < length; ++i) ASSERT_EQ(covered[i], 1) << "float " << i;
      }
    }
  }
}

TEST(ExchangePlan, PieceAtRefusesWhatIsNoPiece) {
  const ExchangePlan plan(100, 3, 10);  // shards [0,34) [34,67) [67,100)
  EXPECT_EQ(plan.shard_begin(1), 34u);
  EXPECT_EQ(plan.piece_at(1, 34, 10), std::optional<size_t>(0));
  EXPECT_EQ(plan.piece_at(1, 64, 3), std::optional<size_t>(3));
  EXPECT_FALSE(plan.piece_at(1, 35, 10)) << "not on a piece boundary";
  EXPECT_FALSE(plan.piece_at(1, 34, 9)) << "wrong length";
  EXPECT_FALSE(plan.piece_at(1, 0, 10)) << "another shard's piece";
  EXPECT_FALSE(plan.piece_at(1, 67, 0)) << "past the shard";
  EXPECT_THROW(ExchangePlan(10, 0, 4), std::invalid_argument);
  EXPECT_THROW(ExchangePlan(10, 2, 0), std::invalid_argument);
}

TEST(ChunkHeader, RoundTripsAndRefusesGarbage) {
  ChunkHeader h{PieceKind::kResult,
                6,
                7,
                members_digest(std::vector<uint32_t>{0, 2, 6}),
                ExchangeRound{123456789012ull, 3, 1764089000123456ull},
                1000003,
                262144,
                999000,
                1003,
                77};
  const auto bytes = encode_header(h);
  std::string why;
  const auto back = parse_header(bytes, why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(back->kind, h.kind);
  EXPECT_EQ(back->from, 6u);
  EXPECT_EQ(back->members, 7u);
  EXPECT_EQ(back->members_digest, h.members_digest);
  EXPECT_EQ(back->round, h.round);
  EXPECT_EQ(back->length, 1000003u);
  EXPECT_EQ(back->piece_floats, 262144u);
  EXPECT_EQ(back->offset, 999000u);
  EXPECT_EQ(back->count, 1003u);
  EXPECT_EQ(back->samples, 77u);

  EXPECT_FALSE(parse_header(std::span(bytes).first(40), why));
  EXPECT_NE(why.find("80"), std::string::npos) << why;
  auto bad = bytes;
  bad[0] = std::byte{0};
  EXPECT_FALSE(parse_header(bad, why));
  EXPECT_NE(why.find("magic"), std::string::npos) << why;
  bad = bytes;
  bad[4] = std::byte{9};  // version
  EXPECT_FALSE(parse_header(bad, why));
  EXPECT_NE(why.find("version 9"), std::string::npos) << why;
  bad = bytes;
  bad[6] = std::byte{5};  // kind
  EXPECT_FALSE(parse_header(bad, why));
  h.count = 1004;  // one float past the buffer
  EXPECT_FALSE(parse_header(encode_header(h), why));
  EXPECT_NE(why.find("outside"), std::string::npos) << why;
}

TEST(ChunkHeader, RoundsAreOrderedByRunThenStepThenAttempt) {
  // A restarted coordinator's run begins at an earlier step than the one
  // before it ended with; its rounds still come after every one of those.
  const ExchangeRound before_restart{120, 2, 1000};
  const ExchangeRound after_restart{100, 0, 2000};
  EXPECT_LT(before_restart, after_restart);
  EXPECT_LT((ExchangeRound{100, 0, 2000}), (ExchangeRound{100, 1, 2000}));
  EXPECT_LT((ExchangeRound{100, 9, 2000}), (ExchangeRound{101, 0, 2000}));
  EXPECT_NE((ExchangeRound{100, 0, 1000}), (ExchangeRound{100, 0, 2000}));
}

TEST(ChunkHeader, TheDigestTellsMemberListsApart) {
  const std::vector<uint32_t> a{0, 1, 2}, b{0, 1, 3}, c{0, 1}, d{1, 0, 2};
  EXPECT_NE(members_digest(a), members_digest(b));
  EXPECT_NE(members_digest(a), members_digest(c));
  EXPECT_NE(members_digest(a), members_digest(d));
  EXPECT_EQ(members_digest(a), members_digest(std::vector<uint32_t>{0, 1, 2}));
}

}  // namespace
}  // namespace dctrain
