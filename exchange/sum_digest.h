// What a member says about the sum it holds after a round, so that the
// coordinator can tell that every member holds the same sum and that the sum
// forwarded to it is that sum (coordinator/planes/exchange_steps.cc).
//
// One digest per shard of the round (ExchangePlan's shards, in shard order,
// i.e. by owner): a cryptographic hash of the shard's bytes, 32 bytes long,
// so that finding two shards with one digest takes about 2^128 work. Not the
// replicas' checksum (model/param_table.h): that one is a fast multiply-xor,
// fine against chance but trivially steered, and here the one who could
// steer it is a member that wants another sum to pass as the agreed one.
// Per shard, so that when members disagree the digests say whose shard
// differs: its owner sent different sums to different members (or a member
// misreports).
//
// Two hashes, the same argument for both (collision resistance; docs/
// security.md): SHA-256 (OpenSSL, which runs it on the CPU's SHA
// instructions where there are some: 1.2 GB/s a core here, against 0.6 for
// BLAKE2b) and BLAKE2b (libsodium; faster than SHA-256 without them). The
// coordinator picks one per round from what its members offer
// (sum_digests_offered), and every member of the round takes that one.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "exchange/plan.h"
#include "proto/wire.pb.h"

namespace dctrain {

inline constexpr size_t kSumDigestBytes = 32;

enum class SumDigestKind { kBlake2b, kSha256 };

// "sha256", "blake2b".
std::string_view digest_name(SumDigestKind kind);
std::optional<SumDigestKind> digest_from_name(std::string_view name);
// Whether this CPU has SHA instructions (x86 SHA-NI; ARMv8 SHA2).
bool cpu_has_sha_instructions();
// What this process offers, the faster first: SHA-256 first where the CPU
// has SHA instructions, else BLAKE2b first. Either is computed everywhere.
std::vector<SumDigestKind> sum_digests_offered();
// "sha256, blake2b".
std::string digest_names(const std::vector<SumDigestKind>& kinds);
// A round's hash: `forced` when set; else SHA-256 when every offer (each a
// process's, the fastest first) puts it first, else BLAKE2b.
SumDigestKind choose_sum_digest(std::optional<SumDigestKind> forced,
                                const std::vector<std::vector<SumDigestKind>>& offers);

v1::SumDigestKind to_wire(SumDigestKind kind);
SumDigestKind from_wire(v1::SumDigestKind kind);

// The digests of `sum`'s shards under a round of `members` members (the
// shard bounds depend only on the length and the member count).
std::vector<std::string> shard_digests(std::span<const float> sum, size_t members,
                                       SumDigestKind kind);
// The same over a sum held in pieces (a message's frames: [gradient |
// statistics]), taken in order as one buffer of floats.
std::vector<std::string> shard_digests(const std::vector<std::span<const std::byte>>& pieces,
                                       size_t members, SumDigestKind kind);

// The same digests taken while a round's pieces land in `result`, in any
// order: a shard's hash takes its pieces in order, each as soon as the ones
// before it are in (a piece that lands early waits in `result` for its
// turn), so the hashing overlaps the round's waits and reads each piece
// while it is likely still in cache.
class ShardDigester {
 public:
  ShardDigester(const ExchangePlan& plan, std::span<const float> result, SumDigestKind kind);
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
