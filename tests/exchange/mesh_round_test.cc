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

namespace dctrain {
namespace {

using Clock = std::chrono::steady_clock;

// A piece on its way: for `to`, its header's bytes and its floats' bytes.
struct InFlight {
  uint32_t to = 0;
  std::vector<std::byte> header;
  zmq::message_t payload;
};

// The members of one round and the queue between them.
class Mesh {
 public:
  // `n` members (ranks 0, 2, 4, ...: not 0..n-1, so positions and ranks
  // differ), each contributing `length` floats of its own in pieces of
  // `piece_floats`, with 10 + rank samples.
  Mesh(size_t n, size_t length, size_t piece_floats) {
    for (uint32_t i = 0; i < n; ++i) ranks_.push_back(2 * i);
    Rng rng(length * 31 + n);
    for (size_t i = 0; i < n; ++i) {
      // Magnitudes far apart, so that the order of a float sum shows.
      const float scale = i % 3 == 0 ? 1e4f : (i % 3 == 1 ? 1.0f : 1e-4f);
      std::vector<float>& c = contributions.emplace_back(length);
      for (float& v : c) v = scale * static_cast<float>(rng.normal());
      results.emplace_back(length, 0.0f);
      stats.emplace_back();
    }
    for (size_t i = 0; i < n; ++i) {
      sinks_.push_back(std::make_unique<Sink>(*this));
      rounds.push_back(std::make_unique<MeshRound>(
          ExchangeRound{7, 0, 1}, ranks_, ranks_[i], contributions[i], 10 + ranks_[i], results[i],
          piece_floats, true, *sinks_[i], stats[i], Clock::now()));
    }
  }

  MeshRound& at_rank(uint32_t rank) { return *rounds[rank / 2]; }
  std::span<const uint32_t> ranks() const { return ranks_; }

  // Every member sends its contribution, then every piece in flight is
  // delivered, in an order drawn from `seed`, until none is left; what a
  // member refused is kept in `refusals`.
  void run(uint64_t seed) {
    for (auto& r : rounds) r->send_contribution();
    Rng rng(seed);
    while (!in_flight_.empty()) {
      const size_t at = rng.next_u64() % in_flight_.size();
      InFlight piece = std::move(in_flight_[at]);
      in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(at));
      deliver(std::move(piece));
    }
  }

  // As the transport hands a piece to its member: the header parsed.
  void deliver(InFlight piece) {
    std::string why;
    const std::optional<ChunkHeader> h = parse_header(piece.header, why);
    ASSERT_TRUE(h.has_value()) << why;
    if (auto refused = at_rank(piece.to).take(*h, std::move(piece.payload))) {
      refusals.push_back(*refused);
    }
  }

  // A copy of the last piece sent to `to` from `from`, as it went out.
  InFlight copy_of_sent(uint32_t from, uint32_t to) const {
    for (auto it = sent_.rbegin(); it != sent_.rend(); ++it) {
      if (it->first.from == from && it->second.to == to) {
        return InFlight{to, it->second.header,
                        zmq::message_t(it->second.payload.data(), it->second.payload.size())};
      }
    }
    ADD_FAILURE() << "no piece from " << from << " to " << to;
    return {};
  }

  // Members whose pieces are lost on the way.
  std::set<uint32_t> silent;
  // A member whose summed pieces claim one sample more than the round has.
  std::optional<uint32_t> overcounting_owner;

  std::vector<std::vector<float>> contributions, results;
  std::vector<ExchangeStats> stats;
  std::vector<std::unique_ptr<MeshRound>> rounds;
  std::vector<std::string> refusals;

 private:
  class Sink final : public PieceSink {
   public:
    explicit Sink(Mesh& mesh) : mesh_(mesh) {}
    void send(uint32_t to, const ChunkHeader& sent, const float* data) override {
      ChunkHeader header = sent;
      if (header.kind == PieceKind::kResult && mesh_.overcounting_owner == header.from) {
        ++header.samples;
      }
      const auto bytes = encode_header(header);
      InFlight piece{to, std::vector<std::byte>(bytes.begin(), bytes.end()),
                     zmq::message_t(data, header.count * sizeof(float))};
      mesh_.sent_.emplace_back(
          header, InFlight{to, piece.header, zmq::message_t(data, header.count * sizeof(float))});
      if (!mesh_.silent.contains(header.from)) mesh_.in_flight_.push_back(std::move(piece));
    }

   private:
    Mesh& mesh_;
  };

  std::vector<uint32_t> ranks_;
  std::vector<std::unique_ptr<Sink>> sinks_;
  std::deque<InFlight> in_flight_;
  std::vector<std::pair<ChunkHeader, InFlight>> sent_;
};

// ((0 + c0) + c1) + ... over the members in rank order, as float.
std::vector<float> rank_order_sum(const std::vector<std::vector<float>>& contributions) {
  std::vector<float> sum(contributions.front().size(), 0.0f);
  for (const std::vector<float>& c : contributions) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += c[i];
  }
  return sum;
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
        MeshRound& r = *mesh.rounds[i];
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
    MeshRound& r = mesh.at_rank(rank);
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
    MeshRound& r = mesh.at_rank(rank);
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
