#include "exchange/sum_digest.h"

#include <fmt/format.h>
#include <sodium.h>

#include <algorithm>
#include <stdexcept>

namespace dctrain {

std::vector<std::string> shard_digests(std::span<const float> sum, size_t members) {
  return shard_digests({std::as_bytes(sum)}, members);
}

std::vector<std::string> shard_digests(const std::vector<std::span<const std::byte>>& pieces,
                                       size_t members) {
  if (members == 0) throw std::invalid_argument("shard_digests: a round of no members");
  size_t bytes = 0;
  for (const auto& p : pieces) bytes += p.size();
  if (bytes % sizeof(float) != 0) {
    throw std::invalid_argument(fmt::format("shard_digests: {} bytes are no whole floats", bytes));
  }
  // The shard bounds do not depend on the piece size.
  const ExchangePlan plan(bytes / sizeof(float), members, 1);
  std::vector<std::string> out(members, std::string(kSumDigestBytes, '\0'));
  size_t piece = 0, offset = 0;  // the cursor over `pieces`
  for (size_t s = 0; s < members; ++s) {
    size_t left = (plan.shard_end(s) - plan.shard_begin(s)) * sizeof(float);
    crypto_generichash_state state;
    crypto_generichash_init(&state, nullptr, 0, kSumDigestBytes);
    while (left > 0) {
      const std::span<const std::byte> p = pieces[piece];
      const size_t n = std::min(left, p.size() - offset);
      crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(p.data() + offset),
                                n);
      left -= n;
      offset += n;
      if (offset == p.size()) {
        ++piece;
        offset = 0;
      }
    }
    crypto_generichash_final(&state, reinterpret_cast<unsigned char*>(out[s].data()),
                             kSumDigestBytes);
  }
  return out;
}

struct ShardDigester::Hashes {
  std::vector<crypto_generichash_state> states;  // by shard
  std::vector<std::vector<bool>> in;             // by shard, by piece
  std::vector<size_t> next;                      // by shard: the first piece not hashed yet
};

ShardDigester::ShardDigester(const ExchangePlan& plan, std::span<const float> result)
    : plan_(plan), result_(result), hashes_(std::make_unique<Hashes>()) {
  const size_t shards = plan.members();
  hashes_->states.resize(shards);
  hashes_->in.resize(shards);
  hashes_->next.assign(shards, 0);
  for (size_t s = 0; s < shards; ++s) {
    crypto_generichash_init(&hashes_->states[s], nullptr, 0, kSumDigestBytes);
    hashes_->in[s].assign(plan.pieces(s), false);
  }
}

ShardDigester::~ShardDigester() = default;

void ShardDigester::landed(size_t shard, size_t index) {
  Hashes& h = *hashes_;
  h.in[shard][index] = true;
  for (size_t& k = h.next[shard]; k < h.in[shard].size() && h.in[shard][k]; ++k) {
    const PieceRange p = plan_.piece(shard, k);
    const std::span<const std::byte> bytes = std::as_bytes(result_.subspan(p.offset, p.count));
    crypto_generichash_update(&h.states[shard],
                              reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  }
}

std::vector<std::string> ShardDigester::digests() {
  Hashes& h = *hashes_;
  std::vector<std::string> out(h.states.size(), std::string(kSumDigestBytes, '\0'));
  for (size_t s = 0; s < h.states.size(); ++s) {
    if (h.next[s] != h.in[s].size()) {
      throw std::logic_error(
          fmt::format("ShardDigester: shard {} has {} of {} pieces", s, h.next[s], h.in[s].size()));
    }
    crypto_generichash_final(&h.states[s], reinterpret_cast<unsigned char*>(out[s].data()),
                             kSumDigestBytes);
  }
  return out;
}

std::vector<size_t> differing_shards(const std::vector<std::string>& a,
                                     const std::vector<std::string>& b) {
  std::vector<size_t> out;
  const size_t n = std::max(a.size(), b.size());
  for (size_t s = 0; s < n; ++s) {
    if (a.size() != b.size() || a[s] != b[s]) out.push_back(s);
  }
  return out;
}

}  // namespace dctrain
