#include "exchange/sum_digest.h"

#include <fmt/format.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <variant>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace dctrain {
namespace {

// OpenSSL's GMAC, fetched once.
EVP_MAC* gmac_algorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "GMAC", nullptr);
  if (mac == nullptr) throw std::runtime_error("sum check: OpenSSL has no GMAC");
  return mac;
}

// One running hash or tag of a shard, fed its bytes in order.
class StreamHash {
 public:
  // A hash (not keyed).
  explicit StreamHash(SumDigestKind kind) {
    if (kind == SumDigestKind::kBlake2b) {
      crypto_generichash_init(&state_.emplace<crypto_generichash_state>(), nullptr, 0,
                              kSumDigestBytes);
      return;
    }
    if (keyed(kind)) throw std::logic_error("StreamHash: a keyed check needs its key");
    EvpContext& c = state_.emplace<EvpContext>(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
    if (!c || EVP_DigestInit_ex(c.get(), EVP_sha256(), nullptr) != 1) {
      throw std::runtime_error("sum digest: OpenSSL could not start a SHA-256");
    }
  }
  // GMAC under `key`, shard `shard`'s: the shard's index is the nonce.
  StreamHash(std::span<const std::byte> key, size_t shard) {
    if (key.size() != kSumKeyBytes) {
      throw std::invalid_argument(
          fmt::format("sum check: a key of {} bytes, not {}", key.size(), kSumKeyBytes));
    }
    MacContext& c =
        state_.emplace<MacContext>(EVP_MAC_CTX_new(gmac_algorithm()), &EVP_MAC_CTX_free);
    unsigned char iv[12] = {};
    const uint64_t nonce = shard;
    std::memcpy(iv, &nonce, sizeof nonce);
    char cipher[] = "AES-256-GCM";
    const OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, cipher, 0),
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, iv, sizeof iv), OSSL_PARAM_END};
    if (!c || EVP_MAC_init(c.get(), reinterpret_cast<const unsigned char*>(key.data()), key.size(),
                           params) != 1) {
      throw std::runtime_error("sum check: OpenSSL could not start a GMAC");
    }
  }
  void update(std::span<const std::byte> bytes) {
    const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
    if (auto* b = std::get_if<crypto_generichash_state>(&state_)) {
      crypto_generichash_update(b, data, bytes.size());
    } else if (auto* m = std::get_if<MacContext>(&state_)) {
      EVP_MAC_update(m->get(), data, bytes.size());
    } else {
      EVP_DigestUpdate(std::get<EvpContext>(state_).get(), data, bytes.size());
    }
  }
  std::string final() {
    if (auto* m = std::get_if<MacContext>(&state_)) {
      std::string out(kSumTagBytes, '\0');
      size_t n = 0;
      if (EVP_MAC_final(m->get(), reinterpret_cast<unsigned char*>(out.data()), &n, out.size()) !=
              1 ||
          n != kSumTagBytes) {
        throw std::runtime_error("sum check: OpenSSL could not finish a GMAC");
      }
      return out;
    }
    std::string out(kSumDigestBytes, '\0');
    auto* to = reinterpret_cast<unsigned char*>(out.data());
    if (auto* b = std::get_if<crypto_generichash_state>(&state_)) {
      crypto_generichash_final(b, to, kSumDigestBytes);
    } else {
      unsigned int n = 0;
      EVP_DigestFinal_ex(std::get<EvpContext>(state_).get(), to, &n);
    }
    return out;
  }

 private:
  using EvpContext = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;
  using MacContext = std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)>;
  std::variant<crypto_generichash_state, EvpContext, MacContext> state_;
};

// Each shard's bytes of `pieces` (a buffer of floats in pieces) under a
// round of `members`, fed in order to the hash `start(shard)` makes.
template <class Start>
std::vector<std::string> per_shard(const std::vector<std::span<const std::byte>>& pieces,
                                   size_t members, Start start) {
  if (members == 0) throw std::invalid_argument("sum check: a round of no members");
  size_t bytes = 0;
  for (const auto& p : pieces) bytes += p.size();
  if (bytes % sizeof(float) != 0) {
    throw std::invalid_argument(fmt::format("sum check: {} bytes are no whole floats", bytes));
  }
  // The shard bounds do not depend on the piece size.
  const ExchangePlan plan(bytes / sizeof(float), members, 1);
  std::vector<std::string> out;
  out.reserve(members);
  size_t piece = 0, offset = 0;  // the cursor over `pieces`
  for (size_t s = 0; s < members; ++s) {
    size_t left = (plan.shard_end(s) - plan.shard_begin(s)) * sizeof(float);
    StreamHash hash = start(s);
    while (left > 0) {
      const std::span<const std::byte> p = pieces[piece];
      const size_t n = std::min(left, p.size() - offset);
      hash.update(p.subspan(offset, n));
      left -= n;
      offset += n;
      if (offset == p.size()) {
        ++piece;
        offset = 0;
      }
    }
    out.push_back(hash.final());
  }
  return out;
}

}  // namespace

std::string_view digest_name(SumDigestKind kind) {
  switch (kind) {
    case SumDigestKind::kSha256:
      return "sha256";
    case SumDigestKind::kGmac:
      return "gmac";
    case SumDigestKind::kBlake2b:
      break;
  }
  return "blake2b";
}

std::optional<SumDigestKind> digest_from_name(std::string_view name) {
  if (name == "gmac") return SumDigestKind::kGmac;
  if (name == "sha256") return SumDigestKind::kSha256;
  if (name == "blake2b") return SumDigestKind::kBlake2b;
  return std::nullopt;
}

bool cpu_has_sha_instructions() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (b & (1u << 29)) != 0;
#elif defined(__aarch64__)
  return (getauxval(AT_HWCAP) & HWCAP_SHA2) != 0;
#else
  return false;
#endif
}

bool cpu_has_carryless_multiply() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 1)) != 0;
#elif defined(__aarch64__)
  return (getauxval(AT_HWCAP) & HWCAP_PMULL) != 0;
#else
  return false;
#endif
}

std::vector<SumDigestKind> sum_digests_offered() {
  std::vector<SumDigestKind> out{SumDigestKind::kGmac, SumDigestKind::kSha256,
                                 SumDigestKind::kBlake2b};
  // Without SHA instructions BLAKE2b is the faster hash; without a
  // carry-less multiply GMAC goes last.
  if (!cpu_has_sha_instructions()) std::swap(out[1], out[2]);
  if (!cpu_has_carryless_multiply()) std::rotate(out.begin(), out.begin() + 1, out.end());
  return out;
}

std::string digest_names(const std::vector<SumDigestKind>& kinds) {
  std::string out;
  for (SumDigestKind k : kinds) out += (out.empty() ? "" : ", ") + std::string(digest_name(k));
  return out;
}

SumDigestKind choose_sum_digest(std::optional<SumDigestKind> forced,
                                const std::vector<std::vector<SumDigestKind>>& offers) {
  if (forced) return *forced;
  if (offers.empty() || offers.front().empty()) return SumDigestKind::kBlake2b;
  const SumDigestKind first = offers.front().front();
  const bool agreed = std::all_of(offers.begin(), offers.end(), [first](const auto& offer) {
    return !offer.empty() && offer.front() == first;
  });
  return agreed ? first : SumDigestKind::kBlake2b;
}

v1::SumDigestKind to_wire(SumDigestKind kind) {
  switch (kind) {
    case SumDigestKind::kSha256:
      return v1::SUM_DIGEST_SHA256;
    case SumDigestKind::kGmac:
      return v1::SUM_DIGEST_GMAC;
    case SumDigestKind::kBlake2b:
      break;
  }
  return v1::SUM_DIGEST_BLAKE2B;
}

SumDigestKind from_wire(v1::SumDigestKind kind) {
  switch (kind) {
    case v1::SUM_DIGEST_SHA256:
      return SumDigestKind::kSha256;
    case v1::SUM_DIGEST_GMAC:
      return SumDigestKind::kGmac;
    default:
      return SumDigestKind::kBlake2b;
  }
}

std::vector<std::string> shard_digests(std::span<const float> sum, size_t members,
                                       SumDigestKind kind) {
  return shard_digests({std::as_bytes(sum)}, members, kind);
}

std::vector<std::string> shard_digests(const std::vector<std::span<const std::byte>>& pieces,
                                       size_t members, SumDigestKind kind) {
  return per_shard(pieces, members, [kind](size_t) { return StreamHash(kind); });
}

std::vector<std::string> shard_tags(std::span<const float> sum, size_t members,
                                    std::span<const std::byte> key) {
  return shard_tags({std::as_bytes(sum)}, members, key);
}

std::vector<std::string> shard_tags(const std::vector<std::span<const std::byte>>& pieces,
                                    size_t members, std::span<const std::byte> key) {
  return per_shard(pieces, members, [key](size_t shard) { return StreamHash(key, shard); });
}

struct ShardDigester::Hashes {
  std::vector<StreamHash> states;     // by shard
  std::vector<std::vector<bool>> in;  // by shard, by piece
  std::vector<size_t> next;           // by shard: the first piece not hashed yet
};

ShardDigester::ShardDigester(const ExchangePlan& plan, std::span<const float> result,
                             SumDigestKind kind)
    : plan_(plan), result_(result), hashes_(std::make_unique<Hashes>()) {
  const size_t shards = plan.members();
  hashes_->states.reserve(shards);
  hashes_->in.resize(shards);
  hashes_->next.assign(shards, 0);
  for (size_t s = 0; s < shards; ++s) {
    hashes_->states.emplace_back(kind);
    hashes_->in[s].assign(plan.pieces(s), false);
  }
}

ShardDigester::~ShardDigester() = default;

void ShardDigester::landed(size_t shard, size_t index) {
  Hashes& h = *hashes_;
  h.in[shard][index] = true;
  for (size_t& k = h.next[shard]; k < h.in[shard].size() && h.in[shard][k]; ++k) {
    const PieceRange p = plan_.piece(shard, k);
    h.states[shard].update(std::as_bytes(result_.subspan(p.offset, p.count)));
  }
}

std::vector<std::string> ShardDigester::digests() {
  Hashes& h = *hashes_;
  std::vector<std::string> out;
  out.reserve(h.states.size());
  for (size_t s = 0; s < h.states.size(); ++s) {
    if (h.next[s] != h.in[s].size()) {
      throw std::logic_error(
          fmt::format("ShardDigester: shard {} has {} of {} pieces", s, h.next[s], h.in[s].size()));
    }
    out.push_back(h.states[s].final());
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
