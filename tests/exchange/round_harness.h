// Rounds of one schedule (exchange/round_schedule.h) without a socket,
// joined by a queue in memory that delivers their pieces, headers encoded
// and parsed as on the wire, in an order drawn from a seed.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/random.h"
#include "exchange/chunk.h"
#include "exchange/round_schedule.h"

namespace dctrain::testing {

using Clock = std::chrono::steady_clock;

// A piece on its way: for `to`, its header's bytes and its floats' bytes.
struct InFlight {
  uint32_t to = 0;
  std::vector<std::byte> header;
  zmq::message_t payload;
};

// The members of one round on `schedule` and the queue between them.
class Mesh {
 public:
  // `n` members (ranks 0, 2, 4, ...: not 0..n-1, so positions and ranks
  // differ), each contributing `length` floats of its own in pieces of
  // `piece_floats`, with 10 + rank samples.
  Mesh(size_t n, size_t length, size_t piece_floats,
       ExchangeSchedule schedule = ExchangeSchedule::kDirect) {
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
      const RoundInputs in{
          ExchangeRound{7, 0, 1}, ranks_,     ranks_[i],    contributions[i],
          10 + ranks_[i],         results[i], piece_floats, SumDigestKind::kBlake2b};
      rounds.push_back(make_round(schedule, in, *sinks_[i], stats[i], Clock::now()));
    }
  }

  RoundSchedule& at_rank(uint32_t rank) { return *rounds[rank / 2]; }
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

  // Every piece sent, as it went out (the header before any rewriting).
  const std::vector<std::pair<ChunkHeader, InFlight>>& sent() const { return sent_; }

  // Members whose pieces are lost on the way.
  std::set<uint32_t> silent;
  // A member whose summed pieces claim one sample more than the round has.
  std::optional<uint32_t> overcounting_owner;

  std::vector<std::vector<float>> contributions, results;
  std::vector<ExchangeStats> stats;
  std::vector<std::unique_ptr<RoundSchedule>> rounds;
  std::vector<std::string> refusals;

 private:
  class Sink final : public PieceSink {
   public:
    explicit Sink(Mesh& mesh) : mesh_(mesh) {}
    void send(uint32_t to, const ChunkHeader& sent, const float* data) override {
      ChunkHeader header = sent;
      if ((header.kind == PieceKind::kResult || header.kind == PieceKind::kHalvingGather) &&
          mesh_.overcounting_owner == header.from) {
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

}  // namespace dctrain::testing
