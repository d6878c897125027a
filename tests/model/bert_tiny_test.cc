// bert-tiny against an independent PyTorch model (tests/fixtures/
// make_bert_fixture.py): logits at the masked positions, loss, every
// gradient, a 10-step AdamW trajectory; and its own invariants.
#include "model/bert_tiny.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/random.h"
#include "model/optimizer.h"
#include "tests/model/fixture_reader.h"
#include "tests/model/gradcheck.h"

namespace dctrain {
namespace {

// A fixture of tests/fixtures/make_bert_fixture.py, read once.
const testing::Fixture& fixture(const std::string& file = "bert_fixture.bin") {
  static std::map<std::string, std::unique_ptr<testing::Fixture>> read;
  std::unique_ptr<testing::Fixture>& f = read[file];
  if (!f) f = std::make_unique<testing::Fixture>(DCTRAIN_SOURCE_DIR "/tests/fixtures/" + file);
  return *f;
}

template <typename To>
std::vector<To> as(const std::vector<double>& v) {
  return std::vector<To>(v.begin(), v.end());
}

TEST(BertTiny, HasTheParameterCountOfPyTorchsBertTiny) {
  auto model = make_model({.name = "bert-tiny", .vocab_size = 30522});
  EXPECT_EQ(model->name(), "bert-tiny");
  EXPECT_EQ(model->table().total(), 4'367'546u);
  EXPECT_EQ(BertTiny::parameter_count(30522, 128), 4'367'546);
  EXPECT_EQ(fixture().scalar("parameter_count_30522"), 4'367'546.0);
  EXPECT_EQ(model->buffer_table().total(), 0u);
}

TEST(BertTiny, InitialisesAsBert) {
  BertTiny model({.name = "bert-tiny", .seed = 5, .vocab_size = 1000});
  const ParamTable& table = model.table();
  for (size_t i = 0; i < table.size(); ++i) {
    const auto w = model.parameters().view(i);
    const std::string& name = table[i].name;
    if (table[i].shape.size() == 2) {
      double sq = 0;
      for (float x : w) sq += static_cast<double>(x) * x;
      EXPECT_NEAR(std::sqrt(sq / static_cast<double>(w.size())), 0.02, 0.002) << name;
    } else {
      const float want = name.ends_with("norm.weight") ? 1.0f : 0.0f;
      for (float x : w) ASSERT_EQ(x, want) << name;
    }
  }
  BertTiny again({.name = "bert-tiny", .seed = 5, .vocab_size = 1000});
  EXPECT_EQ(checksum(model.parameters().flat()), checksum(again.parameters().flat()));
}

// The fixture's model, weights and batch.
struct FixtureCase {
  std::unique_ptr<BertTiny> model;
  Batch batch;
};

FixtureCase load_fixture_case(const testing::Fixture& f) {
  const auto config = f["config"].values;  // vocab, positions, n, t
  FixtureCase c;
  ModelSpec spec{.name = "bert-tiny",
                 .vocab_size = static_cast<int>(config[0]),
                 .max_seq_len = static_cast<int>(config[1]),
                 .dropout = 0.0f};
  if (f.has("sizes")) {  // another size of the family: layers, hidden, heads, ffn
    const auto sizes = f["sizes"].values;
    spec.name = "bert";
    spec.layers = static_cast<int>(sizes[0]);
    spec.hidden = static_cast<int>(sizes[1]);
    spec.heads = static_cast<int>(sizes[2]);
    spec.intermediate = static_cast<int>(sizes[3]);
  }
  c.model = std::make_unique<BertTiny>(spec);
  const ParamTable& table = c.model->table();
  std::string names;
  for (double ch : f["names"].values) names.push_back(static_cast<char>(ch));
  std::string ours;
  for (size_t i = 0; i < table.size(); ++i) {
    ours += (i ? "\n" : "") + table[i].name;
    const auto& w = f["weight." + table[i].name];
    EXPECT_EQ(w.shape, table[i].shape) << table[i].name;
    std::copy(w.values.begin(), w.values.end(), c.model->parameters().view(i).begin());
  }
  EXPECT_EQ(ours, names) << "parameter order differs from the PyTorch model's";
  c.batch.kind = BatchKind::kTokens;
  c.batch.size = static_cast<int>(config[2]);
  c.batch.seq_len = static_cast<int>(config[3]);
  c.batch.tokens = as<int32_t>(f["tokens"].values);
  c.batch.token_types = as<int32_t>(f["token_types"].values);
  c.batch.attention = as<uint8_t>(f["attention"].values);
  c.batch.labels = as<int32_t>(f["labels"].values);
  return c;
}

// bert-tiny, and a second size of the family (3 layers, hidden 64, 4 heads,
// feed-forward 96).
class BertVsPyTorch : public ::testing::TestWithParam<const char*> {};

TEST_P(BertVsPyTorch, LogitsLossAndEveryGradient) {
  const auto& f = fixture(GetParam());
  FixtureCase c = load_fixture_case(f);
  const MicroBatchResult eval = c.model->evaluate(c.batch);
  const double loss = f.scalar("loss_sum");
  EXPECT_EQ(eval.loss_terms, 7);
  EXPECT_EQ(eval.samples, 2);
  EXPECT_NEAR(eval.loss_sum, loss, 2e-6 * loss);
  const auto& logits = f["masked_logits"].values;
  const auto ours = c.model->masked_logits();
  ASSERT_EQ(ours.size(), logits.size());
  double worst = 0;
  for (size_t i = 0; i < ours.size(); ++i) worst = std::max(worst, std::abs(ours[i] - logits[i]));
  EXPECT_LT(worst, 1e-5) << "largest logit error";

  c.model->gradients().zero();
  const MicroBatchResult train = c.model->train_micro_batch(c.batch);
  EXPECT_EQ(train.loss_sum, eval.loss_sum) << "no dropout: training and evaluation agree";
  EXPECT_EQ(train.loss_terms, 7);
  const ParamTable& table = c.model->table();
  double worst_ratio = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const auto& want = f["grad." + table[i].name].values;
    const auto got = c.model->gradients().view(i);
    if (table[i].name.ends_with("attention.key.bias")) {
      // Shifts every score of a row alike: the softmax cancels it, the
      // gradient is 0 up to rounding in both implementations.
      for (size_t j = 0; j < want.size(); ++j) {
        EXPECT_LT(std::abs(want[j]), 1e-12);
        EXPECT_LT(std::abs(got[j]), 1e-6f);
      }
      continue;
    }
    double top = 0, error = 0;
    for (size_t j = 0; j < want.size(); ++j) {
      top = std::max(top, std::abs(want[j]));
      error = std::max(error, std::abs(got[j] - want[j]));
    }
    // Stored to 2^-16 of the largest element; float32 against float64 adds
    // well under 1e-4 of it.
    EXPECT_LE(error, 1e-4 * top) << table[i].name << " (largest " << top << ")";
    EXPECT_GT(top, 0.0) << table[i].name << " has no gradient: the fixture proves nothing there";
    worst_ratio = std::max(worst_ratio, error / top);
  }
  std::printf(
      "logits: largest error %.3g; loss: relative error %.3g; gradients: largest error "
      "%.3g of the tensor's largest element\n",
      worst, std::abs(eval.loss_sum - loss) / loss, worst_ratio);
}

TEST_P(BertVsPyTorch, AdamWTrajectory) {
  const auto& f = fixture(GetParam());
  FixtureCase c = load_fixture_case(f);
  auto adamw = make_optimizer({.name = "adamw", .weight_decay = 0.01}, c.model->table());
  const auto& want = f["trajectory"].values;
  double worst = 0;
  for (size_t step = 0; step < want.size(); ++step) {
    c.model->gradients().zero();
    const MicroBatchResult r = c.model->train_micro_batch(c.batch);
    const double mean = r.loss_sum / static_cast<double>(r.loss_terms);
    EXPECT_NEAR(mean, want[step], 1e-5 * want[step]) << "step " << step;
    worst = std::max(worst, std::abs(mean - want[step]) / want[step]);
    const auto scale = static_cast<float>(1.0 / static_cast<double>(r.loss_terms));
    for (float& g : c.model->gradients().flat()) g *= scale;
    adamw->step(c.model->parameters().flat(), c.model->gradients().flat(), 1e-3);
  }
  EXPECT_LT(want.back(), 0.8 * want.front()) << "the reference trajectory should be learning";
  std::printf("trajectory: largest relative loss error %.3g over %zu steps\n", worst, want.size());
}

INSTANTIATE_TEST_SUITE_P(Sizes, BertVsPyTorch,
                         ::testing::Values("bert_fixture.bin", "bert_l3_h64_a4_i96.bin"),
                         [](const auto& p) {
                           return std::string(p.param) == "bert_fixture.bin" ? "bert_tiny"
                                                                             : "bert_l3_h64_a4_i96";
                         });

// A random MLM batch: n sequences of t tokens, a few padded at the end of
// odd sequences, `masked` masked positions per sequence.
Batch random_batch(int n, int t, int vocab, int masked, uint64_t seed) {
  Batch b;
  b.kind = BatchKind::kTokens;
  b.size = n;
  b.seq_len = t;
  Rng rng(seed);
  const size_t cells = static_cast<size_t>(n) * t;
  b.tokens.resize(cells);
  b.token_types.assign(cells, 0);
  b.attention.assign(cells, 1);
  b.labels.assign(cells, kIgnoreLabel);
  for (int s = 0; s < n; ++s) {
    const int real = s % 2 == 1 ? t - 3 : t;
    for (int p = 0; p < t; ++p) {
      const size_t i = static_cast<size_t>(s) * t + p;
      b.tokens[i] = static_cast<int32_t>(rng.below(vocab));
      b.token_types[i] = p >= t / 2 ? 1 : 0;
      if (p >= real) {
        b.attention[i] = 0;
        b.tokens[i] = 0;
      }
    }
    for (int k = 0; k < masked; ++k) {
      const size_t i = static_cast<size_t>(s) * t + 1 + static_cast<size_t>(rng.below(real - 2));
      b.labels[i] = static_cast<int32_t>(rng.below(vocab));
      b.tokens[i] = 3;
    }
  }
  return b;
}

// Sequences [from, to) of a batch.
Batch slice(const Batch& b, int from, int to) {
  Batch s = b;
  s.size = to - from;
  const auto t = static_cast<size_t>(b.seq_len);
  auto cut = [&](auto& v) {
    v.assign(v.begin() + static_cast<long>(from * t), v.begin() + static_cast<long>(to * t));
  };
  cut(s.tokens);
  cut(s.token_types);
  cut(s.attention);
  cut(s.labels);
  return s;
}

TEST(BertTiny, TheBertFamilyIsSizedByTheConfigAndBertTinyIsItsDefault) {
  // Sized as bert-tiny, the family is bert-tiny value for value: the same
  // parameters from the same seed, the same loss and gradient on a batch.
  const Batch batch = random_batch(4, 32, 300, 9, 1);
  BertTiny tiny({.name = "bert-tiny", .seed = 3, .vocab_size = 300});
  BertTiny family({.name = "bert",
                   .seed = 3,
                   .vocab_size = 300,
                   .layers = 2,
                   .hidden = 128,
                   .heads = 2,
                   .intermediate = 512});
  EXPECT_EQ(family.name(), "bert-tiny");
  EXPECT_EQ(checksum(tiny.parameters().flat()), checksum(family.parameters().flat()));
  EXPECT_EQ(tiny.train_micro_batch(batch).loss_sum, family.train_micro_batch(batch).loss_sum);
  EXPECT_EQ(checksum(tiny.gradients().flat()), checksum(family.gradients().flat()));

  // BERT-mini (Google's L-4, H-256, A-4): every tensor of every layer.
  BertTiny mini({.name = "bert",
                 .seed = 3,
                 .vocab_size = 30522,
                 .layers = 4,
                 .hidden = 256,
                 .heads = 4,
                 .intermediate = 1024});
  EXPECT_EQ(mini.name(), "bert-L4-H256-A4");
  EXPECT_EQ(static_cast<int64_t>(mini.table().total()),
            BertTiny::parameter_count({.vocab_size = 30522,
                                       .max_positions = 128,
                                       .hidden = 256,
                                       .layers = 4,
                                       .heads = 4,
                                       .ffn = 1024}));
  // Counted from the layers: embeddings (words, positions, 2 token types,
  // LayerNorm); per layer Q, K, V, O (256 x 256 + 256 each), LayerNorm,
  // 256 -> 1024 -> 256 with biases, LayerNorm; the head's transform and
  // LayerNorm and the decoder bias (its weight is the word embeddings).
  const int64_t h = 256, f = 1024, v = 30522;
  const int64_t counted = (v + 128 + 2) * h + 2 * h +
                          4 * (4 * (h * h + h) + 2 * h + h * f + f + f * h + h + 2 * h) +
                          (h * h + h + 2 * h + v);
  EXPECT_EQ(static_cast<int64_t>(mini.table().total()), counted);
  EXPECT_NE(mini.table().find("layer3.attention.query.weight"), nullptr);
  // It learns: a few SGD steps on one batch lower its loss.
  BertTiny small({.name = "bert",
                  .seed = 5,
                  .vocab_size = 300,
                  .dropout = 0.0f,
                  .layers = 3,
                  .hidden = 64,
                  .heads = 4,
                  .intermediate = 96});
  EXPECT_EQ(small.name(), "bert-L3-H64-A4-I96");
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 10; ++step) {
    small.gradients().zero();
    const MicroBatchResult r = small.train_micro_batch(batch);
    (step == 0 ? first : last) = r.loss_sum / static_cast<double>(r.loss_terms);
    std::span<float> p = small.parameters().flat();
    std::span<const float> g = small.gradients().flat();
    for (size_t i = 0; i < p.size(); ++i) p[i] -= 0.5f * g[i] / static_cast<float>(r.loss_terms);
  }
  EXPECT_LT(last, 0.8 * first) << "first " << first << ", last " << last;
  // Heads that do not divide the hidden size are refused.
  EXPECT_THROW(BertTiny({.name = "bert",
                         .vocab_size = 300,
                         .layers = 1,
                         .hidden = 100,
                         .heads = 3,
                         .intermediate = 64}),
               std::invalid_argument);
}

// The gradient of a size other than bert-tiny's (BERT-mini's shape, 4
// layers of 4 heads, at hidden 64): the loss along the gradient and along
// random directions changes as the gradient says.
TEST(BertTiny, ANewSizesGradientMatchesFiniteDifferences) {
  BertTiny model({.name = "bert",
                  .seed = 8,
                  .vocab_size = 300,
                  .dropout = 0.0f,
                  .layers = 4,
                  .hidden = 64,
                  .heads = 4,
                  .intermediate = 256});
  testing::expect_directional_derivatives(model, random_batch(3, 24, 300, 5, 4), 3, 1e-3, 2e-3);
}

TEST(BertTiny, ThreadCountDoesNotChangeABit) {
  // 18 sequences: 3 encoder chunks; > 128 masked rows: 3 head blocks; vocab
  // 5000: 3 vocabulary slices.
  const Batch batch = random_batch(18, 32, 5000, 9, 1);
  uint64_t sums[2];
  double losses[2];
  for (int threads : {1, 2}) {
    BertTiny model({.name = "bert-tiny", .seed = 3, .threads = threads, .vocab_size = 5000});
    const MicroBatchResult r = model.train_micro_batch(batch);
    losses[threads - 1] = r.loss_sum;
    sums[threads - 1] = checksum(model.gradients().flat());
    EXPECT_GT(r.loss_terms, 128);  // masked positions may coincide
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(sums[0], sums[1]);
}

TEST(BertTiny, SplittingAMicroBatchAddsUpWithDropout) {
  // Dropout masks follow the sequence, not its place in a micro-batch, so
  // two halves add up to the whole (up to float rounding).
  const Batch batch = random_batch(12, 24, 3000, 4, 2);
  BertTiny whole({.name = "bert-tiny", .seed = 4, .vocab_size = 3000});
  BertTiny halves({.name = "bert-tiny", .seed = 4, .vocab_size = 3000});
  const MicroBatchResult all = whole.train_micro_batch(batch);
  const MicroBatchResult a = halves.train_micro_batch(slice(batch, 0, 5));
  const MicroBatchResult b = halves.train_micro_batch(slice(batch, 5, 12));
  EXPECT_EQ(all.loss_terms, a.loss_terms + b.loss_terms);
  EXPECT_NEAR(all.loss_sum, a.loss_sum + b.loss_sum, 1e-5 * all.loss_sum);
  const auto g1 = whole.gradients().flat(), g2 = halves.gradients().flat();
  double top = 0, error = 0;
  for (size_t i = 0; i < g1.size(); ++i) {
    top = std::max(top, static_cast<double>(std::abs(g1[i])));
    error = std::max(error, static_cast<double>(std::abs(g1[i] - g2[i])));
  }
  EXPECT_LT(error, 1e-4 * top);
  EXPECT_GT(top, 0.0);
}

TEST(BertTiny, DropoutIsDeterministicAndOffInEvaluation) {
  const Batch batch = random_batch(4, 16, 500, 3, 3);
  BertTiny model({.name = "bert-tiny", .seed = 6, .vocab_size = 500});
  const MicroBatchResult e1 = model.evaluate(batch);
  const MicroBatchResult t1 = model.train_micro_batch(batch);
  const uint64_t once = checksum(model.gradients().flat());
  const MicroBatchResult e2 = model.evaluate(batch);
  EXPECT_EQ(e1.loss_sum, e2.loss_sum);
  EXPECT_EQ(checksum(model.gradients().flat()), once) << "evaluate changed the gradients";
  model.gradients().zero();
  const MicroBatchResult t2 = model.train_micro_batch(batch);
  EXPECT_EQ(t1.loss_sum, t2.loss_sum);
  EXPECT_EQ(checksum(model.gradients().flat()), once);
  EXPECT_NE(t1.loss_sum, e1.loss_sum) << "dropout 0.1 should change the training loss";
  // Near ln(vocab) at initialisation.
  EXPECT_NEAR(e1.loss_sum / static_cast<double>(e1.loss_terms), std::log(500.0), 0.3);
  // train_micro_batch adds: a second call doubles the gradient.
  const std::vector<float> single(model.gradients().flat().begin(), model.gradients().flat().end());
  model.train_micro_batch(batch);
  const auto twice = model.gradients().flat();
  for (size_t i = 0; i < twice.size(); ++i) {
    ASSERT_NEAR(twice[i], 2.0f * single[i], 1e-6f * (1.0f + std::abs(single[i]))) << i;
  }
}

TEST(BertTiny, RejectsBadBatches) {
  BertTiny model({.name = "bert-tiny", .vocab_size = 100, .max_seq_len = 16});
  Batch good = random_batch(2, 16, 100, 2, 4);
  EXPECT_NO_THROW(model.evaluate(good));
  Batch bad = good;
  bad.tokens[3] = 100;
  EXPECT_THROW(model.evaluate(bad), std::invalid_argument);
  bad = good;
  bad.labels[0] = 100;
  EXPECT_THROW(model.evaluate(bad), std::invalid_argument);
  bad = random_batch(2, 17, 100, 2, 4);
  EXPECT_THROW(model.evaluate(bad), std::invalid_argument);
  bad = good;
  bad.kind = BatchKind::kImage;
  EXPECT_THROW(model.train_micro_batch(bad), std::invalid_argument);
  EXPECT_THROW(BertTiny({.name = "bert-tiny", .dropout = 1.0f}), std::invalid_argument);
}

}  // namespace
}  // namespace dctrain
