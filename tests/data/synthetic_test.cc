// The generated datasets: deterministic from their seed, and learnable. The
// accuracies of simple fixed predictors quoted in data/README.md come from
// here (printed), with lower bounds asserted.
#include "data/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>

#include "data/dataset_factory.h"
#include "data/image_dataset.h"
#include "data/text_mlm.h"
#include "tests/data/data_test_util.h"

namespace dctrain {
namespace {

std::vector<uint64_t> range(uint64_t begin, uint64_t end) {
  std::vector<uint64_t> ids;
  for (uint64_t i = begin; i < end; ++i) ids.push_back(i);
  return ids;
}

TEST(SyntheticImages, SameSeedSameBytesOtherSeedOtherBytes) {
  SyntheticImageOptions options;
  options.samples = 50;
  const ImageSet a = generate_synthetic_images(options);
  const ImageSet b = generate_synthetic_images(options);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.labels, b.labels);
  options.seed = 1;
  EXPECT_NE(generate_synthetic_images(options).pixels, a.pixels);
  options.seed = 0;
  options.eval = true;
  EXPECT_NE(generate_synthetic_images(options).pixels, a.pixels);
  // Every class occurs; pixels use the whole range.
  options.samples = 500;
  const ImageSet big = generate_synthetic_images(options);
  for (int k = 0; k < 10; ++k) EXPECT_GE(std::count(big.labels.begin(), big.labels.end(), k), 20);
  EXPECT_EQ(*std::max_element(big.pixels.begin(), big.pixels.end()), 255);
  EXPECT_EQ(*std::min_element(big.pixels.begin(), big.pixels.end()), 0);
}

// Nearest class mean, fitted on the train split, scored on the eval split.
double nearest_centroid_accuracy(const Dataset& train, const Dataset& eval) {
  const SampleShape shape = train.shape();
  const size_t dims = static_cast<size_t>(shape.channels) * shape.height * shape.width;
  std::vector<double> centroid(static_cast<size_t>(shape.classes) * dims, 0.0);
  std::vector<double> count(static_cast<size_t>(shape.classes), 0.0);
  const Batch t = train.make_batch(range(0, train.size()), {.train = false});
  for (int n = 0; n < t.size; ++n) {
    const auto k = static_cast<size_t>(t.labels[static_cast<size_t>(n)]);
    count[k] += 1.0;
    for (size_t d = 0; d < dims; ++d)
      centroid[k * dims + d] += t.images[static_cast<size_t>(n) * dims + d];
  }
  for (size_t k = 0; k < count.size(); ++k)
    for (size_t d = 0; d < dims; ++d) centroid[k * dims + d] /= std::max(count[k], 1.0);
  const Batch e = eval.make_batch(range(0, eval.size()), {.train = false});
  int correct = 0;
  for (int n = 0; n < e.size; ++n) {
    double best = std::numeric_limits<double>::max();
    int best_class = -1;
    for (int k = 0; k < shape.classes; ++k) {
      double distance = 0.0;
      for (size_t d = 0; d < dims; ++d) {
        const double diff = e.images[static_cast<size_t>(n) * dims + d] -
                            centroid[static_cast<size_t>(k) * dims + d];
        distance += diff * diff;
      }
      if (distance < best) {
        best = distance;
        best_class = k;
      }
    }
    correct += best_class == e.labels[static_cast<size_t>(n)];
  }
  return static_cast<double>(correct) / e.size;
}

TEST(SyntheticImages, LearnableByEvenANearestCentroidClassifier) {
  for (const auto& [c, h, w] : {std::tuple{3, 32, 32}, std::tuple{1, 28, 28}}) {
    DatasetSpec spec;
    spec.kind = "synthetic-images";
    spec.channels = c;
    spec.height = h;
    spec.width = w;
    const auto train = make_dataset(spec, "/nonexistent");
    spec.split = Split::kEval;
    const auto eval = make_dataset(spec, "/nonexistent");
    EXPECT_EQ(train->size(), 10000u);
    EXPECT_EQ(eval->size(), 2000u);
    const double accuracy = nearest_centroid_accuracy(*train, *eval);
    std::printf("synthetic-images %dx%dx%d: nearest-centroid eval accuracy %.3f (chance 0.100)\n",
                c, h, w, accuracy);
    EXPECT_GT(accuracy, 0.5);
  }
}

TEST(SyntheticText, DeterministicAndTokenisedWithoutUnknowns) {
  const SyntheticCorpus a = generate_synthetic_corpus(4, 2000);
  const SyntheticCorpus b = generate_synthetic_corpus(4, 2000);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_NE(generate_synthetic_corpus(5, 2000).text, a.text);
  DatasetSpec spec;
  spec.kind = "synthetic-text";
  const auto train = make_dataset(spec, "/nonexistent");
  const auto& text = dynamic_cast<const TextMlmDataset&>(*train);
  const int32_t unk = text.vocab().special().unk;
  EXPECT_EQ(std::count(text.packed_stream().begin(), text.packed_stream().end(), unk), 0);
  EXPECT_GT(train->size(), 1000u);
  EXPECT_EQ(train->shape().seq_len, 128);
  std::printf("synthetic-text: vocab %d, %llu train sequences\n", train->shape().vocab_size,
              static_cast<unsigned long long>(train->size()));
}

// Masked-token accuracy on the eval split of two fixed predictors fitted on
// the train stream: the most frequent token, and the most frequent successor
// of the (visible) left neighbour.
TEST(SyntheticText, NeighboursPredictMaskedTokensFarAboveTheUnigramRate) {
  DatasetSpec spec;
  spec.kind = "synthetic-text";
  const auto train = make_dataset(spec, "/nonexistent");
  spec.split = Split::kEval;
  const auto eval = make_dataset(spec, "/nonexistent");
  const auto& stream = dynamic_cast<const TextMlmDataset&>(*train).packed_stream();
  const int vocab = train->shape().vocab_size;
  std::vector<int> unigram(static_cast<size_t>(vocab), 0);
  std::map<std::pair<int32_t, int32_t>, int> bigram;
  for (size_t i = 0; i < stream.size(); ++i) {
    ++unigram[static_cast<size_t>(stream[i])];
    if (i > 0) ++bigram[{stream[i - 1], stream[i]}];
  }
  const auto top =
      static_cast<int32_t>(std::max_element(unigram.begin(), unigram.end()) - unigram.begin());
  std::vector<int32_t> successor(static_cast<size_t>(vocab), top);
  std::vector<int> best(static_cast<size_t>(vocab), 0);
  for (const auto& [pair, n] : bigram) {
    if (n > best[static_cast<size_t>(pair.first)]) {
      best[static_cast<size_t>(pair.first)] = n;
      successor[static_cast<size_t>(pair.first)] = pair.second;
    }
  }
  const Batch b = eval->make_batch(range(0, eval->size()), {.seed = 1, .train = false});
  const int32_t mask = dynamic_cast<const TextMlmDataset&>(*eval).vocab().special().mask;
  int masked = 0, unigram_hits = 0, bigram_hits = 0;
  for (size_t i = 0; i < b.labels.size(); ++i) {
    if (b.labels[i] == kIgnoreLabel) continue;
    ++masked;
    unigram_hits += b.labels[i] == top;
    const int32_t left = b.tokens[i - 1];
    bigram_hits += b.labels[i] == (left == mask ? top : successor[static_cast<size_t>(left)]);
  }
  const double unigram_accuracy = static_cast<double>(unigram_hits) / masked;
  const double bigram_accuracy = static_cast<double>(bigram_hits) / masked;
  std::printf(
      "synthetic-text eval masked-token accuracy: unigram %.3f, left-bigram %.3f "
      "(%d masked positions)\n",
      unigram_accuracy, bigram_accuracy, masked);
  EXPECT_GT(bigram_accuracy, 0.15);
  EXPECT_GT(bigram_accuracy, 4 * unigram_accuracy);
}

}  // namespace
}  // namespace dctrain
