// What a member says about the sum it holds after a round, so that the
// coordinator can tell that every member holds the same sum and that the sum
// forwarded to it is that sum (coordinator/planes/exchange_steps.cc).
//
// One digest per shard of the round (ExchangePlan's shards, in shard order,
// i.e. by owner): BLAKE2b (libsodium's crypto_generichash) of the shard's
// bytes, 16 bytes long. A cryptographic hash, not the replicas' checksum
// (model/param_table.h): that one is a fast multiply-xor, fine against
// chance but trivially steered, and here the one who could steer it is a
// member that wants another sum to pass as the agreed one. Per shard, so
// that when members disagree the digests say whose shard differs: its owner
// sent different sums to different members (or a member misreports).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "exchange/plan.h"

namespace dctrain {

inline constexpr size_t kSumDigestBytes = 16;

// The digests of `sum`'s shards under a round of `members` members (the
// shard bounds depend only on the length and the member count).
std::vector<std::string> shard_digests(std::span<const float> sum, size_t members);
// The same over a sum held in pieces (a message's frames: [gradient |
// statistics]), taken in order as one buffer of floats.
std::vector<std::string> shard_digests(const std::vector<std::span<const std::byte>>& pieces,
                                       size_t members);

// The same digests taken while a round's pieces land in `result`, in any
// order: a shard's hash takes its pieces in order, each as soon as the ones
// before it are in (a piece that lands early waits in `result` for its
// turn), so the hashing overlaps the round's waits and reads each piece
// while it is likely still in cache.
class ShardDigester {
 public:
  ShardDigester(const ExchangePlan& plan, std::span<const float> result);
  ~ShardDigester();
  ShardDigester(const ShardDigester&) = delete;
  ShardDigester& operator=(const ShardDigester&) = delete;

  // Piece `index` of shard `shard` is in `result` (each piece once).
  void landed(size_t shard, size_t index);
  // Once every piece has landed: shard_digests() of `result`.
  std::vector<std::string> digests();

 private:
  struct Hashes;
  const ExchangePlan& plan_;
  std::span<const float> result_;
  std::unique_ptr<Hashes> hashes_;
};

// The shards (in shard order) on which two lists of digests differ; all of
// them when the lists differ in length.
std::vector<size_t> differing_shards(const std::vector<std::string>& a,
                                     const std::vector<std::string>& b);

}  // namespace dctrain
