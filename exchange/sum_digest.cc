#include "exchange/sum_digest.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
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

// One running hash of either kind, fed in order.
class StreamHash {
 public:
  explicit StreamHash(SumDigestKind kind) {
    if (kind == SumDigestKind::kBlake2b) {
      crypto_generichash_init(&state_.emplace<crypto_generichash_state>(), nullptr, 0,
                              kSumDigestBytes);
      return;
    }
    EvpContext& c = state_.emplace<EvpContext>(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
    if (!c || EVP_DigestInit_ex(c.get(), EVP_sha256(), nullptr) != 1) {
      throw std::runtime_error("sum digest: OpenSSL could not start a SHA-256");
    }
  }
  void update(std::span<const std::byte> bytes) {
    const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
    if (auto* b = std::get_if<crypto_generichash_state>(&state_)) {
      crypto_generichash_update(b, data, bytes.size());
    } else {
      EVP_DigestUpdate(std::get<EvpContext>(state_).get(), data, bytes.size());
    }
  }
  std::string final() {
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
  std::variant<crypto_generichash_state, EvpContext> state_;
};

}  // namespace

std::string_view digest_name(SumDigestKind kind) {
  return kind == SumDigestKind::kSha256 ? "sha256" : "blake2b";
}

std::optional<SumDigestKind> digest_from_name(std::string_view name) {
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

std::vector<SumDigestKind> sum_digests_offered() {
  if (cpu_has_sha_instructions()) return {SumDigestKind::kSha256, SumDigestKind::kBlake2b};
  return {SumDigestKind::kBlake2b, SumDigestKind::kSha256};
}

std::string digest_names(const std::vector<SumDigestKind>& kinds) {
  std::string out;
  for (SumDigestKind k : kinds) out += (out.empty() ? "" : ", ") + std::string(digest_name(k));
  return out;
}

SumDigestKind choose_sum_digest(std::optional<SumDigestKind> forced,
                                const std::vector<std::vector<SumDigestKind>>& offers) {
  if (forced) return *forced;
  const bool sha_first = std::all_of(offers.begin(), offers.end(), [](const auto& offer) {
    return !offer.empty() && offer.front() == SumDigestKind::kSha256;
  });
  return sha_first ? SumDigestKind::kSha256 : SumDigestKind::kBlake2b;
}

v1::SumDigestKind to_wire(SumDigestKind kind) {
  return kind == SumDigestKind::kSha256 ? v1::SUM_DIGEST_SHA256 : v1::SUM_DIGEST_BLAKE2B;
}

SumDigestKind from_wire(v1::SumDigestKind kind) {
  return kind == v1::SUM_DIGEST_SHA256 ? SumDigestKind::kSha256 : SumDigestKind::kBlake2b;
}

std::vector<std::string> shard_digests(std::span<const float> sum, size_t members,
                                       SumDigestKind kind) {
  return shard_digests({std::as_bytes(sum)}, members, kind);
}

std::vector<std::string> shard_digests(const std::vector<std::span<const std::byte>>& pieces,
                                       size_t members, SumDigestKind kind) {
  if (members == 0) throw std::invalid_argument("shard_digests: a round of no members");
  size_t bytes = 0;
  for (const auto& p : pieces) bytes += p.size();
  if (bytes % sizeof(float) != 0) {
    throw std::invalid_argument(fmt::format("shard_digests: {} bytes are no whole floats", bytes));
  }
  // The shard bounds do not depend on the piece size.
  const ExchangePlan plan(bytes / sizeof(float), members, 1);
  std::vector<std::string> out;
  out.reserve(members);
  size_t piece = 0, offset = 0;  // the cursor over `pieces`
  for (size_t s = 0; s < members; ++s) {
    size_t left = (plan.shard_end(s) - plan.shard_begin(s)) * sizeof(float);
    StreamHash hash(kind);
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
