// The MNIST CNN learns: one epoch of the ready config's recipe (SGD momentum
// 0.9, lr 0.05, batch 64, shuffled) on the real training set reaches at
// least 98% accuracy on the 10,000 test images, in one process.
//
// The margin is thin and the recipe, not the engine, sets it: measured test
// accuracies after one epoch are 98.00% (seed 1), 98.47% (seed 2) and 98.07%
// (seed 3) here, and 98.12% for PyTorch 1.13 on the same recipe (its seed 0
// initialisation and order). The run is deterministic (bit-identical for
// any thread count), so seed 2 passes or fails the same way every time; a
// change that moves it below 98% changed the numerics and deserves a look.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <vector>

#include "common/random.h"
#include "data/dataset_factory.h"
#include "model/model.h"
#include "model/optimizer.h"

namespace dctrain {
namespace {

TEST(MnistLearning, OneEpochReaches98PercentTestAccuracy) {
  const std::filesystem::path root = DCTRAIN_SHARED_DATA;
  if (!std::filesystem::exists(root / "mnist")) GTEST_SKIP() << "no MNIST under " << root;
  DatasetSpec data;
  data.kind = "mnist";
  data.split = Split::kTrain;
  const auto train = make_dataset(data, root);
  data.split = Split::kEval;
  const auto test = make_dataset(data, root);
  ASSERT_EQ(train->size(), 60000u);
  ASSERT_EQ(test->size(), 10000u);

  ModelSpec spec;
  spec.name = "mnist-cnn";
  spec.seed = 2;
  spec.threads = 1;
  spec.image_channels = 1;
  spec.image_height = spec.image_width = 28;
  auto model = make_model(spec);
  OptimizerSpec opt;
  opt.name = "sgd";
  opt.momentum = 0.9;
  auto sgd = make_optimizer(opt, model->table());

  std::vector<uint64_t> order(train->size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  Rng rng({spec.seed, 0x5u});
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);

  const auto t0 = std::chrono::steady_clock::now();
  constexpr size_t kBatch = 64;
  const SampleContext context{spec.seed, 0, true};
  Batch batch;
  double loss_sum = 0.0;
  int64_t seen = 0;
  for (size_t begin = 0; begin < order.size(); begin += kBatch) {
    const size_t end = std::min(order.size(), begin + kBatch);
    train->fill(std::span<const uint64_t>(order).subspan(begin, end - begin), context, batch);
    model->gradients().zero();
    const MicroBatchResult r = model->train_micro_batch(batch);
    loss_sum += r.loss_sum;
    seen += r.samples;
    for (float& g : model->gradients().flat()) g /= static_cast<float>(r.samples);
    sgd->step(model->parameters().flat(), model->gradients().flat(), 0.05);
  }
  const double train_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<uint64_t> ids(test->size());
  std::iota(ids.begin(), ids.end(), uint64_t{0});
  int64_t correct = 0, total = 0;
  const SampleContext eval_context{spec.seed, 0, false};
  for (size_t begin = 0; begin < ids.size(); begin += 500) {
    test->fill(
        std::span<const uint64_t>(ids).subspan(begin, std::min<size_t>(500, ids.size() - begin)),
        eval_context, batch);
    const MicroBatchResult r = model->evaluate(batch);
    correct += r.correct;
    total += r.samples;
  }
  const double accuracy = static_cast<double>(correct) / static_cast<double>(total);
  std::printf("mnist-cnn, one epoch: mean train loss %.4f, test accuracy %.4f, %.1f s training\n",
              loss_sum / static_cast<double>(seen), accuracy, train_seconds);
  EXPECT_EQ(total, 10000);
  EXPECT_GE(accuracy, 0.98);
}

}  // namespace
}  // namespace dctrain
