// The sum digests (exchange/sum_digest.h): each shard's hash equals an
// independent implementation's over the shard's bytes (libsodium's SHA-256
// and BLAKE2b one-shot calls), whether the sum is whole, in frames, or lands
// piece by piece in any order; each shard's keyed tag equals AES-256-GCM's
// tag over the shard as associated data (OpenSSL's cipher interface, not
// its MAC); the round's kind is chosen from what every process offers, or
// forced.
#include "exchange/sum_digest.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "exchange/plan.h"

namespace dctrain {
namespace {

std::vector<float> values(size_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(n);
  for (float& v : out) v = normal(rng);
  return out;
}

// The shards' digests computed in one call each by libsodium.
std::vector<std::string> reference(const std::vector<float>& sum, size_t members,
                                   SumDigestKind kind) {
  const ExchangePlan plan(sum.size(), members, 1);
  std::vector<std::string> out;
  for (size_t s = 0; s < members; ++s) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(sum.data() + plan.shard_begin(s));
    const size_t n = (plan.shard_end(s) - plan.shard_begin(s)) * sizeof(float);
    std::string d(kSumDigestBytes, '\0');
    auto* to = reinterpret_cast<unsigned char*>(d.data());
    if (kind == SumDigestKind::kSha256) {
      static_assert(crypto_hash_sha256_BYTES == kSumDigestBytes);
      crypto_hash_sha256(to, bytes, n);
    } else {
      crypto_generichash(to, kSumDigestBytes, bytes, n, nullptr, 0);
    }
    out.push_back(d);
  }
  return out;
}

class SumDigest : public ::testing::TestWithParam<SumDigestKind> {};

TEST_P(SumDigest, EachShardsDigestIsTheHashOfItsBytesWholeOrInFrames) {
  ASSERT_GE(sodium_init(), 0);
  const std::vector<float> sum = values(10007);
  for (size_t members : {1, 3, 8}) {
    const std::vector<std::string> expected = reference(sum, members, GetParam());
    EXPECT_EQ(shard_digests(sum, members, GetParam()), expected) << members << " members";
    // The same sum in frames whose bounds are not the shards'.
    const auto bytes = std::as_bytes(std::span<const float>(sum));
    const std::vector<std::span<const std::byte>> frames{
        bytes.subspan(0, 4 * 1234), bytes.subspan(4 * 1234, 4 * 5000), bytes.subspan(4 * 6234)};
    EXPECT_EQ(shard_digests(frames, members, GetParam()), expected) << members << " members";
  }
}

TEST_P(SumDigest, PiecesLandingInAnyOrderGiveTheDigestsOfTheWholeSum) {
  ASSERT_GE(sodium_init(), 0);
  const std::vector<float> sum = values(10007);
  const ExchangePlan plan(sum.size(), 4, 300);  // pieces of 300 floats
  std::vector<std::pair<size_t, size_t>> order;
  for (size_t s = 0; s < plan.members(); ++s) {
    for (size_t k = 0; k < plan.pieces(s); ++k) order.emplace_back(s, k);
  }
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  ShardDigester digester(plan, sum, GetParam());
  for (const auto& [shard, piece] : order) digester.landed(shard, piece);
  EXPECT_EQ(digester.digests(), reference(sum, 4, GetParam()));
}

TEST_P(SumDigest, OneFlippedBitChangesItsShardsDigestOnly) {
  std::vector<float> sum = values(4096);
  const std::vector<std::string> before = shard_digests(sum, 4, GetParam());
  reinterpret_cast<unsigned char*>(sum.data())[4 * 2500] ^= 1;  // in shard 2 of 4
  EXPECT_EQ(differing_shards(before, shard_digests(sum, 4, GetParam())), std::vector<size_t>{2});
}

INSTANTIATE_TEST_SUITE_P(BothHashes, SumDigest,
                         ::testing::Values(SumDigestKind::kSha256, SumDigestKind::kBlake2b),
                         [](const ::testing::TestParamInfo<SumDigestKind>& p) {
                           return std::string(digest_name(p.param));
                         });

TEST(SumDigestChoice, TheKindEveryOfferPutsFirstElseBlake2bAndAForcedOneAlways) {
  using K = SumDigestKind;
  const std::vector<K> gmac_first{K::kGmac, K::kSha256, K::kBlake2b};
  const std::vector<K> sha_first{K::kSha256, K::kBlake2b, K::kGmac};
  const std::vector<K> blake_first{K::kBlake2b, K::kSha256, K::kGmac};
  EXPECT_EQ(choose_sum_digest(std::nullopt, {gmac_first, gmac_first}), K::kGmac);
  EXPECT_EQ(choose_sum_digest(std::nullopt, {sha_first, sha_first, sha_first}), K::kSha256);
  EXPECT_EQ(choose_sum_digest(std::nullopt, {gmac_first, sha_first}), K::kBlake2b);
  EXPECT_EQ(choose_sum_digest(std::nullopt, {sha_first, blake_first, sha_first}), K::kBlake2b);
  EXPECT_EQ(choose_sum_digest(std::nullopt, {sha_first, {}}), K::kBlake2b);
  EXPECT_EQ(choose_sum_digest(K::kSha256, {blake_first, blake_first}), K::kSha256);
  EXPECT_EQ(choose_sum_digest(K::kGmac, {blake_first}), K::kGmac);
}

TEST(SumDigestChoice, ThisProcessOffersEveryKindTheFasterFirst) {
  const std::vector<SumDigestKind> offered = sum_digests_offered();
  ASSERT_EQ(offered.size(), 3u);
  const SumDigestKind hash =
      cpu_has_sha_instructions() ? SumDigestKind::kSha256 : SumDigestKind::kBlake2b;
  EXPECT_EQ(offered.front(), cpu_has_carryless_multiply() ? SumDigestKind::kGmac : hash);
  EXPECT_EQ(std::set<SumDigestKind>(offered.begin(), offered.end()).size(), 3u);
  for (SumDigestKind k : offered) {
    EXPECT_EQ(from_wire(to_wire(k)), k);
    EXPECT_EQ(digest_from_name(digest_name(k)), k);
  }
  EXPECT_EQ(digest_from_name("md5"), std::nullopt);
  EXPECT_TRUE(keyed(SumDigestKind::kGmac));
  EXPECT_FALSE(keyed(SumDigestKind::kSha256));
}

// GMAC of `bytes` under `key` and a 12-byte nonce of `shard`, through
// OpenSSL's cipher interface (AES-256-GCM with the bytes as associated data
// and nothing encrypted): the tag by another road than shard_tags' MAC.
std::string reference_gmac(std::span<const std::byte> key, size_t shard,
                           std::span<const std::byte> bytes) {
  unsigned char iv[12] = {};
  const uint64_t nonce = shard;
  std::memcpy(iv, &nonce, sizeof nonce);
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  int n = 0;
  std::string tag(kSumTagBytes, '\0');
  EXPECT_EQ(EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr,
                               reinterpret_cast<const unsigned char*>(key.data()), iv),
            1);
  EXPECT_EQ(EVP_EncryptUpdate(c, nullptr, &n, reinterpret_cast<const unsigned char*>(bytes.data()),
                              static_cast<int>(bytes.size())),
            1);
  unsigned char none[16];
  EXPECT_EQ(EVP_EncryptFinal_ex(c, none, &n), 1);
  EXPECT_EQ(
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kSumTagBytes), tag.data()), 1);
  EVP_CIPHER_CTX_free(c);
  return tag;
}

std::vector<std::byte> key_of(unsigned char seed) {
  std::vector<std::byte> key(kSumKeyBytes);
  for (size_t i = 0; i < key.size(); ++i) key[i] = std::byte(static_cast<unsigned char>(seed + i));
  return key;
}

TEST(SumTags, EachShardsTagIsTheGmacOfItsBytesWholeOrInFrames) {
  const std::vector<float> sum = values(10007);
  const std::vector<std::byte> key = key_of(11);
  for (size_t members : {1, 3, 8}) {
    const ExchangePlan plan(sum.size(), members, 1);
    std::vector<std::string> expected;
    for (size_t s = 0; s < members; ++s) {
      const auto shard = std::as_bytes(std::span<const float>(sum).subspan(
          plan.shard_begin(s), plan.shard_end(s) - plan.shard_begin(s)));
      expected.push_back(reference_gmac(key, s, shard));
    }
    EXPECT_EQ(shard_tags(sum, members, key), expected) << members << " members";
    const auto bytes = std::as_bytes(std::span<const float>(sum));
    const std::vector<std::span<const std::byte>> frames{
        bytes.subspan(0, 4 * 1234), bytes.subspan(4 * 1234, 4 * 5000), bytes.subspan(4 * 6234)};
    EXPECT_EQ(shard_tags(frames, members, key), expected) << members << " members";
  }
}

TEST(SumTags, OneFlippedBitChangesItsShardsTagOnlyAndAnotherKeyEveryTag) {
  std::vector<float> sum = values(4096);
  const std::vector<std::string> before = shard_tags(sum, 4, key_of(1));
  EXPECT_EQ(differing_shards(before, shard_tags(sum, 4, key_of(2))),
            (std::vector<size_t>{0, 1, 2, 3}));
  reinterpret_cast<unsigned char*>(sum.data())[4 * 2500] ^= 1;  // in shard 2 of 4
  EXPECT_EQ(differing_shards(before, shard_tags(sum, 4, key_of(1))), std::vector<size_t>{2});
  // Two shards of equal bytes get different tags: each has its own nonce.
  const std::vector<float> zeros(4096, 0.0f);
  const std::vector<std::string> z = shard_tags(zeros, 4, key_of(1));
  EXPECT_NE(z[0], z[1]);
}

TEST(SumTags, AKeyOfTheWrongSizeIsRefused) {
  const std::vector<float> sum = values(64);
  EXPECT_THROW(shard_tags(sum, 2, std::vector<std::byte>(16)), std::invalid_argument);
  EXPECT_THROW(ShardDigester(ExchangePlan(64, 2, 8), sum, SumDigestKind::kGmac), std::logic_error);
}

}  // namespace
}  // namespace dctrain
