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
// Two kinds of check, chosen per round from what the members offer
// (sum_digests_offered), and every member of the round takes the same:
//
// - A hash, taken in the round and sent with the report (collision
//   resistance: docs/security.md): SHA-256 (OpenSSL, on the CPU's SHA
//   instructions where there are some: 1.2 GB/s a core here, against 0.6
//   for BLAKE2b) or BLAKE2b (libsodium; faster than SHA-256 without them).
// - A keyed tag, GMAC (AES-256-GCM's GHASH, OpenSSL: 4.4 GB/s a core here,
//   on the carry-less multiply), taken after the round under a key the
//   coordinator draws once every member has reported and the forwarded sum
//   has arrived, so that every sum being compared was fixed before anyone
//   knew the key. GHASH is a polynomial in the key's hash subkey: two
//   different shards of n 16-byte blocks get one tag under a random key with
//   probability at most (n + 1) / 2^128, about 2^-108 for bert-tiny. Not a
//   hash anyone can be held to without the key; the coordinator sends it
//   with the round check (coordinator/planes/round_check.h).
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

inline constexpr size_t kSumDigestBytes = 32;  // a hash's
inline constexpr size_t kSumKeyBytes = 32;     // a keyed check's key (AES-256)
inline constexpr size_t kSumTagBytes = 16;     // and its tag

enum class SumDigestKind { kBlake2b, kSha256, kGmac };

// Whether the check is a keyed tag taken after the round (kGmac), not a
// hash taken in it and sent with the report.
inline bool keyed(SumDigestKind kind) {
  return kind == SumDigestKind::kGmac;
}

// "sha256", "blake2b", "gmac".
std::string_view digest_name(SumDigestKind kind);
std::optional<SumDigestKind> digest_from_name(std::string_view name);
// Whether this CPU has SHA instructions (x86 SHA-NI; ARMv8 SHA2).
bool cpu_has_sha_instructions();
// Whether it has a carry-less multiply (x86 PCLMULQDQ; ARMv8 PMULL), on
// which GHASH runs.
bool cpu_has_carryless_multiply();
// What this process offers, the faster first: GMAC first where the CPU has
// a carry-less multiply; then SHA-256 first where it has SHA instructions,
// else BLAKE2b. Every kind is computed everywhere.
std::vector<SumDigestKind> sum_digests_offered();
// "gmac, sha256, blake2b".
std::string digest_names(const std::vector<SumDigestKind>& kinds);
// A round's check: `forced` when set; else the kind every offer (each a
// process's, the fastest first) puts first, else BLAKE2b.
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

// The keyed tags (kGmac) of `sum`'s shards under `key` (kSumKeyBytes; the
// shard's index is the nonce, so each shard's tag is taken under its own
// GMAC), over a sum whole or in pieces as shard_digests() takes it.
std::vector<std::string> shard_tags(std::span<const float> sum, size_t members,
                                    std::span<const std::byte> key);
std::vector<std::string> shard_tags(const std::vector<std::span<const std::byte>>& pieces,
                                    size_t members, std::span<const std::byte> key);

// The same digests taken while a round's pieces land in `result`, in any
// order: a shard's hash takes its pieces in order, each as soon as the ones
// before it are in (a piece that lands early waits in `result` for its
// turn), so the hashing overlaps the round's waits and reads each piece
// while it is likely still in cache.
class ShardDigester {
 public:
  // `kind` is a hash, not keyed.
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
