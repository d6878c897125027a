#include "model/image_classifier.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <vector>

#include "common/random.h"
#include "model/model.h"
#include "tests/model/gradcheck.h"

namespace dctrain {
namespace {

ModelSpec spec_for(const std::string& name, int threads = 1, uint64_t seed = 7) {
  ModelSpec spec;
  spec.name = name;
  spec.seed = seed;
  spec.threads = threads;
  if (name != "resnet20" && name != "resnet") {
    spec.image_channels = 1;
    spec.image_height = spec.image_width = 28;
  }
  return spec;
}

Batch random_batch(const ModelSpec& spec, int n, uint64_t seed) {
  Batch b;
  b.kind = BatchKind::kImage;
  b.size = n;
  b.channels = spec.image_channels;
  b.height = spec.image_height;
  b.width = spec.image_width;
  Rng rng(seed);
  b.images.resize(static_cast<size_t>(n) * b.channels * b.height * b.width);
  for (float& x : b.images) x = static_cast<float>(rng.normal());
  for (int i = 0; i < n; ++i) b.labels.push_back(static_cast<int32_t>(rng.below(10)));
  return b;
}

TEST(ImageClassifier, ParameterCountsAreThePublishedOnes) {
  EXPECT_EQ(make_model(spec_for("resnet20"))->table().total(), 269722u);
  EXPECT_EQ(make_model(spec_for("mnist-cnn"))->table().total(), 454922u);
  EXPECT_EQ(make_model(spec_for("mlp"))->table().total(), 784u * 256 + 256 + 256 * 10 + 10);
  auto resnet = make_model(spec_for("resnet20"));
  EXPECT_EQ(resnet->buffer_table().total(), 1376u);  // running mean + var of 19 BatchNorms
  EXPECT_NE(resnet->table().find("layer3.2.conv2.weight"), nullptr);
  EXPECT_NE(resnet->buffer_table().find("layer2.0.bn1.running_var"), nullptr);
}

TEST(ImageClassifier, TheResNetFamilyHasThePublishedSizesAtEveryDepth) {
  // He et al.'s CIFAR ResNets (zero-padding shortcuts): 0.27M, 0.46M, 0.66M,
  // 0.85M and 1.7M parameters at depths 20, 32, 44, 56 and 110. Counted
  // here from the layers: per stage of width c and n blocks, n x (two 3x3
  // convolutions c -> c and two BatchNorms) less, in stages 2 and 3, the
  // first convolution's input at c / 2; plus the stem and the classifier.
  const auto counted = [](int depth, int64_t width) {
    const int64_t n = (depth - 2) / 6;
    int64_t total = 3 * 9 * width + 2 * width;  // conv1, bn1
    for (int stage = 0; stage < 3; ++stage) {
      const int64_t c = width << stage;
      total += n * (2 * 9 * c * c + 4 * c);
      if (stage > 0) total -= 9 * c * c / 2;  // the first conv reads c / 2 channels
    }
    return total + 4 * width * 10 + 10;  // linear
  };
  const std::map<int, uint64_t> published = {
      {20, 269'722}, {32, 464'154}, {44, 658'586}, {56, 853'018}, {110, 1'727'962}};
  for (const auto& [depth, parameters] : published) {
    ModelSpec spec = spec_for("resnet");
    spec.depth = depth;
    const auto model = make_model(spec);
    EXPECT_EQ(model->table().total(), parameters) << depth;
    EXPECT_EQ(static_cast<int64_t>(parameters), counted(depth, 16)) << depth;
    EXPECT_EQ(model->name(), depth == 20 ? "resnet20" : fmt::format("resnet{}", depth));
    const uint64_t blocks = static_cast<uint64_t>(depth - 2) / 6;
    // Running mean and variance of the stem's BatchNorm (16 channels) and
    // of two per block (16 + 32 + 64 channels over the stages).
    EXPECT_EQ(model->buffer_table().total(), 2 * (16 + 2 * blocks * (16 + 32 + 64))) << depth;
    EXPECT_NE(model->table().find(fmt::format("layer3.{}.conv2.weight", blocks - 1)), nullptr);
    EXPECT_EQ(model->table().find(fmt::format("layer3.{}.conv2.weight", blocks)), nullptr);
  }
  // Depth 20 of the family is resnet20, value for value.
  ModelSpec family = spec_for("resnet");
  family.depth = 20;
  const auto a = make_model(family);
  const auto b = make_model(spec_for("resnet20"));
  EXPECT_TRUE(std::equal(a->parameters().flat().begin(), a->parameters().flat().end(),
                         b->parameters().flat().begin(), b->parameters().flat().end()));
  // Width doubles every channel count: 4x the convolutions' parameters.
  ModelSpec wide = spec_for("resnet");
  wide.width = 32;
  const auto w = make_model(wide);
  EXPECT_EQ(static_cast<int64_t>(w->table().total()), counted(20, 32));
  EXPECT_EQ(w->name(), "resnet20-w32");
  // A depth that is not 6n+2 is refused, naming the rule.
  ModelSpec odd = spec_for("resnet");
  odd.depth = 21;
  EXPECT_THROW(make_model(odd), std::invalid_argument);
  // It learns: a few SGD steps on one batch lower its loss (resnet32).
  ModelSpec deeper = spec_for("resnet");
  deeper.depth = 32;
  const auto model = make_model(deeper);
  const Batch batch = random_batch(deeper, 8, 11);
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 8; ++step) {
    model->gradients().zero();
    const MicroBatchResult r = model->train_micro_batch(batch);
    (step == 0 ? first : last) = r.loss_sum / static_cast<double>(r.loss_terms);
    std::span<float> p = model->parameters().flat();
    std::span<const float> g = model->gradients().flat();
    for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.05f * g[i] / 8.0f;
  }
  EXPECT_LT(last, 0.8 * first) << "first " << first << ", last " << last;
}

// The gradient of a size other than resnet20's (ResNet-32 at width 8; the
// layers' own finite-difference tests are in double): the loss along the
// gradient and along random directions changes as the gradient says.
TEST(ImageClassifier, ANewSizesGradientMatchesFiniteDifferences) {
  ModelSpec spec = spec_for("resnet");
  spec.depth = 32;
  spec.width = 8;
  const auto model = make_model(spec);
  testing::expect_directional_derivatives(*model, random_batch(spec, 6, 21), 3, 1e-3, 2e-3);
}

TEST(ImageClassifier, UnknownModelNamesTheKnownOnes) {
  try {
    make_model(spec_for("resnet21"));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("resnet20"), std::string::npos);
  }
}

TEST(ImageClassifier, InitialisationFollowsTheSeed) {
  auto a = make_model(spec_for("resnet20", 1, 1)), b = make_model(spec_for("resnet20", 1, 1));
  auto c = make_model(spec_for("resnet20", 1, 2));
  EXPECT_EQ(checksum(a->parameters().flat()), checksum(b->parameters().flat()));
  EXPECT_NE(checksum(a->parameters().flat()), checksum(c->parameters().flat()));
  // Kaiming-normal: the first conv's weights have std sqrt(2 / 27).
  const auto w = a->parameters().view(0);
  double sq = 0.0;
  for (float v : w) sq += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(w.size())), std::sqrt(2.0 / 27.0), 0.03);
  const auto var = a->buffers().view(1);  // bn1.running_var starts at 1
  for (float v : var) EXPECT_EQ(v, 1.0f);
}

TEST(ImageClassifier, GradientsAreBitIdenticalForAnyThreadCount) {
  for (const char* name : {"resnet20", "mnist-cnn"}) {
    auto one = make_model(spec_for(name, 1)), three = make_model(spec_for(name, 3));
    const Batch batch = random_batch(spec_for(name), 20, 3);
    const MicroBatchResult r1 = one->train_micro_batch(batch);
    const MicroBatchResult r3 = three->train_micro_batch(batch);
    EXPECT_EQ(r1.loss_sum, r3.loss_sum) << name;
    EXPECT_EQ(r1.samples, 20);
    EXPECT_EQ(r1.loss_terms, 20);
    EXPECT_EQ(checksum(one->gradients().flat()), checksum(three->gradients().flat())) << name;
    EXPECT_EQ(checksum(one->statistics().flat()), checksum(three->statistics().flat())) << name;
  }
}

TEST(ImageClassifier, TrainingAddsIntoGradientsAndStatistics) {
  auto model = make_model(spec_for("resnet20"));
  const Batch batch = random_batch(spec_for("resnet20"), 6, 4);
  model->train_micro_batch(batch);
  const std::vector<float> once(model->gradients().flat().begin(), model->gradients().flat().end());
  const std::vector<float> stats(model->statistics().flat().begin(),
                                 model->statistics().flat().end());
  model->train_micro_batch(batch);
  for (size_t i = 0; i < once.size(); ++i)
    ASSERT_FLOAT_EQ(model->gradients().flat()[i], 2 * once[i]);
  for (size_t i = 0; i < stats.size(); ++i)
    ASSERT_FLOAT_EQ(model->statistics().flat()[i], 2 * stats[i]);
  // Training changes no parameter and no running statistic.
  auto fresh = make_model(spec_for("resnet20"));
  EXPECT_EQ(checksum(model->parameters().flat()), checksum(fresh->parameters().flat()));
  EXPECT_EQ(checksum(model->buffers().flat()), checksum(fresh->buffers().flat()));
}

TEST(ImageClassifier, ApplyStatisticsFoldsWithMomentum) {
  auto model = make_model(spec_for("resnet20"));
  const Batch batch = random_batch(spec_for("resnet20"), 4, 5);
  model->train_micro_batch(batch);
  std::vector<float> averaged(model->statistics().flat().begin(), model->statistics().flat().end());
  for (float& v : averaged) v /= 4.0f;
  const std::vector<float> before(model->buffers().flat().begin(), model->buffers().flat().end());
  model->apply_statistics(averaged);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_NEAR(model->buffers().flat()[i], 0.9 * before[i] + 0.1 * averaged[i], 1e-6);
  }
  EXPECT_THROW(model->apply_statistics(std::vector<float>(3)), std::invalid_argument);
}

TEST(ImageClassifier, BatchSizeChangesGiveTheSameResults) {
  auto grown = make_model(spec_for("mnist-cnn")), fresh = make_model(spec_for("mnist-cnn"));
  grown->train_micro_batch(random_batch(spec_for("mnist-cnn"), 9, 6));
  grown->gradients().zero();
  const Batch small = random_batch(spec_for("mnist-cnn"), 3, 7);
  const MicroBatchResult a = grown->train_micro_batch(small);
  const MicroBatchResult b = fresh->train_micro_batch(small);
  EXPECT_EQ(a.loss_sum, b.loss_sum);
  EXPECT_EQ(checksum(grown->gradients().flat()), checksum(fresh->gradients().flat()));
}

TEST(ImageClassifier, EvaluateChangesNoStateAndRejectsBadBatches) {
  auto model = make_model(spec_for("mnist-cnn"));
  Batch batch = random_batch(spec_for("mnist-cnn"), 5, 8);
  const MicroBatchResult r = model->evaluate(batch);
  EXPECT_EQ(r.samples, 5);
  EXPECT_GT(r.loss_sum, 0.0);
  for (float g : model->gradients().flat()) ASSERT_EQ(g, 0.0f);
  batch.height = 32;
  EXPECT_THROW(model->evaluate(batch), std::invalid_argument);
}

}  // namespace
}  // namespace dctrain
