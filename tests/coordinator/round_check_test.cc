// The exchange's norm guard, as the coordinator judges a round
// (coordinator/planes/round_check.h): members' sketches of their own parts, the
// agreed sum, and who is refused.
#include "coordinator/planes/round_check.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "exchange/plan.h"
#include "exchange/sum_digest.h"

namespace dctrain {
namespace {

constexpr uint64_t kParameters = 3000, kBuffers = 60, kLength = kParameters + kBuffers;
// Every member computed 8 samples.
const std::map<uint32_t, uint64_t> kAll = {{0, 8}, {1, 8}, {2, 8}, {3, 8}};

class RoundCheckTest : public testing::Test {
 protected:
  RoundCheckTest() : guard_(guard_config()) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& c : parts_) {
      c.resize(kLength);
      for (size_t i = 0; i < kLength; ++i) c[i] = i < kParameters ? normal(rng) : 8.0f;
    }
  }
  static v1::GuardConfig guard_config() {
    v1::GuardConfig g;
    g.set_norm_multiple(4.0);
    return g;
  }
  std::vector<float> sum() const {
    std::vector<float> out(kLength, 0.0f);
    for (const auto& c : parts_) {
      for (size_t i = 0; i < kLength; ++i) out[i] += c[i];
    }
    return out;
  }
  // Rank `rank`'s answer: the sketch of `values` under the check's request.
  static v1::RoundCheckAnswer answer(const RoundCheck& check, std::span<const float> values) {
    const v1::RoundCheckRequest r = check.request();
    const std::vector<double> sketch =
        sketch_shards(values, SketchShape{kParameters, kLength, r.shards(), r.buckets(), r.seed()});
    v1::RoundCheckAnswer a;
    a.set_attempt(r.attempt());
    a.set_seed(r.seed());
    a.mutable_values()->Assign(sketch.begin(), sketch.end());
    return a;
  }
  RoundCheck check() const {
    return RoundCheck(0, {0, 1, 2, 3}, kParameters, kBuffers,
                      RoundCheck::Asked{99, kSketchBuckets, ""}, 0.0);
  }

  UpdateGuard guard_;
  std::vector<float> parts_[4];
};

TEST_F(RoundCheckTest, HonestMembersPassAndTheirEstimatesAreCloseToTheirNorms) {
  RoundCheck c = check();
  for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(c.take(r, answer(c, parts_[r])));
  ASSERT_TRUE(c.complete());
  const auto estimates = c.estimate(sum());
  for (uint32_t r = 0; r < 4; ++r) {
    double g = 0.0;
    for (size_t i = 0; i < kParameters; ++i) g += static_cast<double>(parts_[r][i]) * parts_[r][i];
    EXPECT_NEAR(estimates.at(r).gradient / std::sqrt(g), 1.0, 0.3) << r;
    EXPECT_NEAR(estimates.at(r).statistics / (8.0 * std::sqrt(kBuffers)), 1.0, 0.3) << r;
  }
  EXPECT_TRUE(c.judge(sum(), guard_, 0, kAll).empty());
}

TEST_F(RoundCheckTest, AnOwnerThatForgesItsShardIsRefusedThoughItReportsHonestly) {
  RoundCheck c = check();
  for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(c.take(r, answer(c, parts_[r])));
  std::vector<float> forged = sum();
  // Rank 2 owns shard 2: one value of it moved far (a sparse forgery),
  // 100 times a typical part's norm (one step is judged against 10 x
  // norm_multiple the typical).
  const ExchangePlan plan(kLength, 4, 1);
  forged[plan.shard_begin(2) + 3] += 5000.0f;
  const std::vector<Refused> refused = c.judge(forged, guard_, 0, kAll);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].rank, 2u);
  EXPECT_NE(refused[0].why.find("as the owner of shard 2"), std::string::npos) << refused[0].why;

  // Its batch statistics forged instead: the same.
  std::vector<float> statistics = sum();
  statistics[kLength - 1] += 1e4f;  // the last shard's, rank 3's
  const std::vector<Refused> by_statistics = c.judge(statistics, guard_, 0, kAll);
  ASSERT_EQ(by_statistics.size(), 1u);
  EXPECT_EQ(by_statistics[0].rank, 3u);
  EXPECT_NE(by_statistics[0].why.find("batch statistics norm"), std::string::npos);
}

TEST_F(RoundCheckTest, APoisonedPartIsRefusedAndALiarCannotFrameAnOwner) {
  // Rank 0 contributes 100 times a typical part and says so.
  {
    RoundCheck c = check();
    std::vector<float> poisoned = parts_[0];
    for (size_t i = 0; i < kParameters; ++i) poisoned[i] *= 100.0f;
    std::swap(parts_[0], poisoned);
    for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(c.take(r, answer(c, parts_[r])));
    const std::vector<Refused> refused = c.judge(sum(), guard_, 0, kAll);
    std::swap(parts_[0], poisoned);
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_EQ(refused[0].rank, 0u);
    EXPECT_EQ(refused[0].why.find("owner"), std::string::npos) << refused[0].why;
  }
  // Rank 1 reports its part of shard 3 inflated (it sent the honest one):
  // rank 3's implied part shrinks by as much, but rank 1's answer is far
  // beyond the others' as given, and is refused before anything is implied
  // from it: rank 3 is not framed.
  RoundCheck c = check();
  std::vector<float> lie = parts_[1];
  const ExchangePlan plan(kLength, 4, 1);
  for (uint64_t i = plan.shard_begin(3); i < plan.shard_begin(3) + 100; ++i) lie[i] += 500.0f;
  for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(c.take(r, answer(c, r == 1 ? lie : parts_[r])));
  std::vector<uint32_t> out;
  for (const Refused& r : c.judge(sum(), guard_, 0, kAll)) out.push_back(r.rank);
  EXPECT_EQ(out, (std::vector<uint32_t>{1}));
}

TEST_F(RoundCheckTest, AForgingOwnerIsRefusedHoweverItAnswersTheRoundCheckRequest) {
  const ExchangePlan plan(kLength, 4, 1);
  std::vector<float> forged = sum();
  forged[plan.shard_begin(2) + 3] += 5000.0f;  // rank 2 forged its shard
  // It answers with its honest part but inflates its sketch of the other
  // shards, so that every other owner's implied part (the sum less the
  // others' answers) looks as large as its own: refused on its answer.
  for (const float inflation : {100.0f, 1e3f, 1e30f}) {
    RoundCheck c = check();
    std::vector<float> lie = parts_[2];
    for (size_t i = 0; i < kLength; ++i) {
      if (i < plan.shard_begin(2) || i >= plan.shard_begin(3)) lie[i] *= inflation;
    }
    for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(c.take(r, answer(c, r == 2 ? lie : parts_[r])));
    const std::vector<Refused> refused = c.judge(forged, guard_, 0, kAll);
    ASSERT_EQ(refused.size(), 1u) << inflation;
    EXPECT_EQ(refused[0].rank, 2u) << inflation;
    EXPECT_NE(refused[0].why.find("its own answer"), std::string::npos) << refused[0].why;
  }
  // It answers 1e300 everywhere: no contribution makes such a sketch; the
  // answer fails (the member is out of the step and counts a failed round).
  RoundCheck c = check();
  v1::RoundCheckAnswer huge = answer(c, parts_[2]);
  for (double& v : *huge.mutable_values()) v = 1e300;
  const std::optional<std::string> problem = c.take(2, huge);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("beyond 1e+100"), std::string::npos) << *problem;
  EXPECT_TRUE(c.failed().contains(2));
}

TEST_F(RoundCheckTest, AMemberGivenMoreSamplesIsComparedPerSample) {
  // Rebalancing gave rank 3 fifty times the others' samples: its part is
  // fifty times as large (beyond 10 x norm_multiple 4 in all), the same per
  // sample, and passes; a part 100 times the others' per sample does not.
  for (float& v : parts_[3]) v *= 50.0f;
  RoundCheck c = check();
  for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(c.take(r, answer(c, parts_[r])));
  std::map<uint32_t, uint64_t> samples = kAll;
  samples[3] = 400;
  EXPECT_EQ(c.judge(sum(), guard_, 0, kAll).size(), 1u) << "in all, it is an outlier";
  EXPECT_TRUE(c.judge(sum(), guard_, 0, samples).empty()) << "per sample, it is not";
  for (float& v : parts_[2]) v *= 100.0f;
  RoundCheck d = check();
  for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(d.take(r, answer(d, parts_[r])));
  const std::vector<Refused> refused = d.judge(sum(), guard_, 0, samples);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].rank, 2u);
  EXPECT_NE(refused[0].why.find("per-sample gradient norm"), std::string::npos) << refused[0].why;
}

TEST_F(RoundCheckTest, MembersThatComputedNothingDoNotMakeTheMedianZero) {
  // Ranks 0 and 1 computed nothing this step (their micro-batches were past
  // tau): their parts are zero, and an honest part of rank 2 or 3 is
  // compared with the one other member that computed, not with zeros.
  std::fill(parts_[0].begin(), parts_[0].end(), 0.0f);
  std::fill(parts_[1].begin(), parts_[1].end(), 0.0f);
  RoundCheck c = check();
  for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(c.take(r, answer(c, parts_[r])));
  EXPECT_FALSE(c.judge(sum(), guard_, 0, kAll).empty()) << "against zeros every part is too large";
  // With ranks 0 and 2 computing, 1 and 3 not: rank 1 forging shard 1 is
  // refused against them; the others pass.
  parts_[0] = parts_[2];
  std::fill(parts_[3].begin(), parts_[3].end(), 0.0f);
  RoundCheck d = check();
  for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(d.take(r, answer(d, parts_[r])));
  EXPECT_TRUE(d.judge(sum(), guard_, 0, {{0, 8}, {2, 8}}).empty());
  std::vector<float> forged = sum();
  const ExchangePlan plan(kLength, 4, 1);
  forged[plan.shard_begin(1)] += 500.0f;
  const std::vector<Refused> refused = d.judge(forged, guard_, 0, {{0, 8}, {2, 8}});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].rank, 1u);
}

TEST_F(RoundCheckTest, AMemberThatComputedNothingMayHoldNothingWhateverTheOthersComputed) {
  // Only rank 0 computed: there is no median to compare with, but ranks 1-3
  // computed nothing, so their parts, the owners' implied ones included,
  // may hold only the sum's rounding.
  for (uint32_t r = 1; r < 4; ++r) std::fill(parts_[r].begin(), parts_[r].end(), 0.0f);
  RoundCheck c = check();
  for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(c.take(r, answer(c, parts_[r])));
  EXPECT_TRUE(c.judge(sum(), guard_, 0, {{0, 8}}).empty()) << "honest zeros pass";
  // Rank 3 owns shard 3 and adds a small value to one float of it.
  std::vector<float> forged = sum();
  const ExchangePlan plan(kLength, 4, 1);
  forged[plan.shard_begin(3) + 1] += 0.5f;
  const std::vector<Refused> refused = c.judge(forged, guard_, 0, {{0, 8}});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].rank, 3u);
  EXPECT_NE(refused[0].why.find("it computed no samples, yet"), std::string::npos)
      << refused[0].why;
  EXPECT_NE(refused[0].why.find("as the owner of shard 3"), std::string::npos) << refused[0].why;

  // The rounding it allows is what a float sum leaves: four members that
  // each computed, summed in float; the part the sum implies for each owner
  // differs from the part it reported by far less than that bound.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& p : parts_) {
    for (size_t i = 0; i < kParameters; ++i) p[i] = normal(rng);
  }
  RoundCheck d = check();
  for (uint32_t r = 0; r < 4; ++r) EXPECT_FALSE(d.take(r, answer(d, parts_[r])));
  const auto estimates = d.estimate(sum());
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_LT(std::abs(estimates.at(r).implied_own - estimates.at(r).reported_own),
              4 * 0x1p-22 * 4 * estimates.at(r).gradient)
        << "the implied part differs from the reported one by the sum's rounding only: " << r;
  }
}

TEST_F(RoundCheckTest, AnswersThatAreNotForThisCheckOrUnusableAreNotTaken) {
  RoundCheck c = check();
  v1::RoundCheckAnswer good = answer(c, parts_[0]);
  EXPECT_TRUE(c.take(7, good)) << "not a member";
  v1::RoundCheckAnswer stale = good;
  stale.set_seed(good.seed() + 1);
  EXPECT_TRUE(c.take(0, stale));
  EXPECT_TRUE(c.failed().empty()) << "another check's answer is only ignored";
  EXPECT_FALSE(c.take(0, good));
  EXPECT_TRUE(c.take(0, good)) << "a second answer";

  v1::RoundCheckAnswer short_one = answer(c, parts_[1]);
  short_one.mutable_values()->RemoveLast();
  EXPECT_TRUE(c.take(1, short_one));
  v1::RoundCheckAnswer nan = answer(c, parts_[2]);
  nan.set_values(0, std::nan(""));
  EXPECT_TRUE(c.take(2, nan));
  EXPECT_EQ(c.unanswered(), (std::vector<uint32_t>{3}));
  v1::RoundCheckAnswer error;
  error.set_attempt(0);
  error.set_seed(good.seed());
  error.set_error("it holds no contribution of step 0");
  EXPECT_TRUE(c.take(3, error));
  EXPECT_TRUE(c.complete());
  EXPECT_EQ(c.failed().size(), 3u);
  EXPECT_NE(c.failed().at(1).find("has 511 values, a round of 4 shards has 512"), std::string::npos)
      << c.failed().at(1);
}

// A keyed sum check without sketches: the request carries the key and no
// buckets; an answer is taken with exactly one tag of kSumTagBytes per
// shard, and the tags are kept by rank.
TEST(RoundCheckTags, AnAnswerGivesOneTagPerShardOfItsSizeOrFails) {
  RoundCheck::Asked asked{5, 0, std::string(kSumKeyBytes, 'k')};
  RoundCheck check(0, {0, 1, 2}, 10, 0, asked, 0.0);
  EXPECT_TRUE(check.tagged());
  EXPECT_FALSE(check.sketched());
  const v1::RoundCheckRequest r = check.request();
  EXPECT_EQ(r.sum_key(), std::string(kSumKeyBytes, 'k'));
  EXPECT_EQ(r.buckets(), 0u);
  auto answer = [](size_t tags, size_t bytes) {
    v1::RoundCheckAnswer a;
    a.set_seed(5);
    for (size_t i = 0; i < tags; ++i) a.add_sum_tags(std::string(bytes, static_cast<char>(i)));
    return a;
  };
  EXPECT_EQ(check.take(0, answer(3, kSumTagBytes)), std::nullopt);
  EXPECT_EQ(check.take(1, answer(2, kSumTagBytes)),
            "it gives 2 tags of the sum, a round of 3 shards has 3");
  EXPECT_EQ(check.take(2, answer(3, 8)), "its tags of the sum are not all 16 bytes");
  EXPECT_TRUE(check.complete());
  EXPECT_EQ(check.failed().size(), 2u);
  ASSERT_EQ(check.tags().size(), 1u);
  EXPECT_EQ(check.tags().at(0).size(), 3u);
  EXPECT_EQ(check.take(0, answer(3, kSumTagBytes)), "it answered already");
}

}  // namespace
}  // namespace dctrain
