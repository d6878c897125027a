// Optimizers, schedules and clipping: hand-computed steps, and trajectories
// recorded from PyTorch (tests/fixtures/make_optimizer_fixture.py).
#include "model/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "model/grad_clip.h"
#include "model/lr_schedule.h"
#include "model/thread_pool.h"
#include "tests/model/fixture_reader.h"

namespace dctrain {
namespace {

ParamTable one_tensor(int64_t count) {
  ParamTable table;
  table.add("w", {count});
  return table;
}
ParamTable one_float() {
  return one_tensor(1);
}

// Each path of the optimizers' step: SGD plain, with weight decay and
// momentum, with Nesterov momentum; AdamW.
const std::vector<OptimizerSpec>& every_step_path() {
  static const std::vector<OptimizerSpec> specs = {
      {.name = "sgd"},
      {.name = "sgd", .weight_decay = 0.1, .momentum = 0.9},
      {.name = "sgd", .momentum = 0.5, .nesterov = true},
      {.name = "adamw", .weight_decay = 0.01},
  };
  return specs;
}
std::string describe(const OptimizerSpec& spec) {
  return spec.name + " momentum " + std::to_string(spec.momentum) +
         (spec.nesterov ? " nesterov" : "");
}

TEST(Sgd, MomentumAndWeightDecayByHand) {
  const ParamTable table = one_float();
  OptimizerSpec spec{.name = "sgd", .weight_decay = 0.1, .momentum = 0.9};
  auto sgd = make_optimizer(spec, table);
  std::vector<float> p = {1.0f};
  const std::vector<float> g = {0.5f};
  sgd->step(p, g, 0.1);  // d = 0.5 + 0.1 = 0.6; b = d; p = 1 - 0.06
  EXPECT_NEAR(p[0], 0.94f, 1e-7f);
  sgd->step(p, g, 0.1);  // d = 0.5 + 0.094 = 0.594; b = 0.54 + 0.594 = 1.134; p = 0.94 - 0.1134
  EXPECT_NEAR(p[0], 0.8266f, 1e-6f);
  EXPECT_NEAR(sgd->state()[0].flat()[0], 1.134f, 1e-6f);
  EXPECT_EQ(sgd->steps(), 2);
}

TEST(Sgd, NesterovByHand) {
  const ParamTable table = one_float();
  auto sgd = make_optimizer({.name = "sgd", .momentum = 0.5, .nesterov = true}, table);
  std::vector<float> p = {1.0f};
  const std::vector<float> g = {1.0f};
  sgd->step(p, g, 0.1);  // b = 1; d = 1 + 0.5 = 1.5; p = 0.85
  EXPECT_NEAR(p[0], 0.85f, 1e-7f);
  sgd->step(p, g, 0.1);  // b = 1.5; d = 1 + 0.75 = 1.75; p = 0.675
  EXPECT_NEAR(p[0], 0.675f, 1e-6f);
}

TEST(AdamW, FirstStepByHand) {
  const ParamTable table = one_float();
  auto adamw = make_optimizer({.name = "adamw", .weight_decay = 0.01}, table);
  std::vector<float> p = {1.0f};
  const std::vector<float> g = {0.5f};
  // p = 0.999; m = 0.05, v = 2.5e-4; step size 0.1 / 0.1 = 1;
  // denom = sqrt(2.5e-4) / sqrt(1e-3) + 1e-8 = 0.5 + 1e-8; p = 0.999 - 0.1.
  adamw->step(p, g, 0.1);
  EXPECT_NEAR(p[0], 0.899f, 1e-6f);
  EXPECT_NEAR(adamw->state()[0].flat()[0], 0.05f, 1e-8f);
  EXPECT_NEAR(adamw->state()[1].flat()[0], 2.5e-4f, 1e-10f);
  EXPECT_EQ(adamw->state_names()[1], "exp_avg_sq");
}

// The exchange's members hold the summed gradient and let the optimizer
// average it on the way in; that must be the bits of averaging the array
// first (Reducer::finish, the star's update), for every optimizer path,
// threaded or not, and with a divisor whose reciprocal is inexact.
TEST(Optimizer, DividingASumInsideTheStepGivesTheBitsOfAveragingItFirst) {
  constexpr int kCount = 100003;
  const ParamTable table = one_tensor(kCount);
  std::vector<float> start(kCount), sum(kCount);
  for (int i = 0; i < kCount; ++i) {
    start[i] = std::sin(static_cast<float>(i));
    sum[i] = i % 13 == 0 ? -0.0f : std::cos(static_cast<float>(5 * i)) * 3e-3f;
  }
  ThreadPool pool(3);
  for (const OptimizerSpec& spec : every_step_path()) {
    for (const float divisor : {1.0f, 3.0f, 96.0f, 7.0f}) {
      SCOPED_TRACE(describe(spec) + " divisor " + std::to_string(divisor));
      std::vector<float> averaged_first = start, divided_inside = start;
      auto first = make_optimizer(spec, table);
      auto inside = make_optimizer(spec, table);
      inside->set_thread_pool(&pool);
      for (int s = 0; s < 3; ++s) {
        std::vector<float> average = sum;
        for (float& g : average) g /= divisor;
        first->step(averaged_first, average, 1e-2);
        inside->step(divided_inside, sum, 1e-2, divisor);
      }
      EXPECT_EQ(checksum(averaged_first), checksum(divided_inside));
      for (size_t k = 0; k < first->state().size(); ++k) {
        EXPECT_EQ(checksum(first->state()[k].flat()), checksum(inside->state()[k].flat()));
      }
    }
  }
}

TEST(Optimizer, AHashedStepWritesTheSameBitsAndHashesWhatItWrote) {
  // 100,003 parameters: six whole checksum blocks and a short seventh.
  constexpr int kCount = 100003;
  const ParamTable table = one_tensor(kCount);
  std::vector<float> start(kCount), gradient(kCount);
  for (int i = 0; i < kCount; ++i) {
    start[i] = std::sin(static_cast<float>(3 * i));
    gradient[i] = std::cos(static_cast<float>(i)) * 2e-3f;
  }
  ThreadPool pool(3);
  for (const OptimizerSpec& spec : every_step_path()) {
    for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
      SCOPED_TRACE(describe(spec) + (threads ? ", 3 threads" : ", 1 thread"));
      std::vector<float> plain = start, hashed = start;
      auto a = make_optimizer(spec, table);
      auto b = make_optimizer(spec, table);
      b->set_thread_pool(threads);
      std::vector<uint64_t> blocks(checksum_blocks(kCount));
      ASSERT_EQ(blocks.size(), 7u);
      for (int s = 0; s < 3; ++s) {  // the first step and later ones (momentum, bias correction)
        a->step(plain, gradient, 1e-2, 4.0f);
        b->step(hashed, gradient, 1e-2, 4.0f, blocks);
        EXPECT_EQ(checksum(plain), checksum(hashed)) << "step " << s;
        EXPECT_EQ(combine_block_checksums(blocks, kCount), block_checksum(hashed)) << "step " << s;
      }
      std::vector<uint64_t> wrong(6);
      EXPECT_THROW(b->step(hashed, gradient, 1e-2, 1.0f, wrong), std::invalid_argument);
    }
  }
}

TEST(Checksum, BlockChecksumSeesEveryBlockInItsPlace) {
  std::vector<float> values(3 * kChecksumBlockFloats + 5);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i % 977);
  const uint64_t base = block_checksum(values);
  EXPECT_EQ(block_checksum(values), base);
  // Any single bit, in any block and in the short last one.
  for (const size_t at : {size_t{0}, kChecksumBlockFloats + 7, values.size() - 1}) {
    std::vector<float> flipped = values;
    uint32_t bits;
    std::memcpy(&bits, &flipped[at], 4);
    bits ^= 1u << 9;
    std::memcpy(&flipped[at], &bits, 4);
    EXPECT_NE(block_checksum(flipped), base) << at;
  }
  // Two whole blocks swapped: the same block checksums in another order.
  std::vector<float> swapped = values;
  std::swap_ranges(swapped.begin(), swapped.begin() + kChecksumBlockFloats,
                   swapped.begin() + kChecksumBlockFloats);
  EXPECT_NE(block_checksum(swapped), base);
  // Without the last float: the length counts.
  EXPECT_NE(block_checksum(std::span<const float>(values).first(values.size() - 1)), base);
}

TEST(Optimizer, RejectsBadSpecsAndSizes) {
  const ParamTable table = one_float();
  EXPECT_THROW(make_optimizer({.name = "lamb"}, table), std::invalid_argument);
  EXPECT_THROW(make_optimizer({.name = "sgd", .nesterov = true}, table), std::invalid_argument);
  EXPECT_THROW(make_optimizer({.name = "adamw", .beta1 = 1.0}, table), std::invalid_argument);
  auto sgd = make_optimizer({.name = "sgd"}, table);
  std::vector<float> p(2), g(2);
  EXPECT_THROW(sgd->step(p, g, 0.1), std::invalid_argument);
  std::vector<float> q(1), h(1);
  for (const float divisor : {0.0f, -2.0f, std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN()}) {
    EXPECT_THROW(sgd->step(q, h, 0.1, divisor), std::invalid_argument) << divisor;
  }
}

TEST(Optimizer, SameGradientSameBitsOnEveryReplica) {
  ParamTable table;
  table.add("w", {1000});
  std::vector<float> a(1000), grad(1000);
  for (int i = 0; i < 1000; ++i) {
    a[i] = std::sin(static_cast<float>(i));
    grad[i] = std::cos(static_cast<float>(3 * i)) * 1e-3f;
  }
  std::vector<float> b = a;
  auto one = make_optimizer({.name = "adamw", .weight_decay = 0.01}, table);
  auto two = make_optimizer({.name = "adamw", .weight_decay = 0.01}, table);
  for (int s = 0; s < 5; ++s) {
    one->step(a, grad, 1e-3);
    two->step(b, grad, 1e-3);
  }
  EXPECT_EQ(checksum(a), checksum(b));
  EXPECT_EQ(checksum(one->state()[1].flat()), checksum(two->state()[1].flat()));
}

// The update is split into chunks over the model's threads and AdamW's
// kernel runs at the widest vector width the CPU has; neither may change a
// bit. 100,003 elements: not a multiple of a chunk or of any vector width.
TEST(Optimizer, ThreadsAndVectorWidthNeverChangeABit) {
  constexpr int kCount = 100003;
  ParamTable table;
  table.add("w", {kCount});
  std::vector<float> start(kCount), grad(kCount);
  for (int i = 0; i < kCount; ++i) {
    start[i] = std::sin(static_cast<float>(i)) * (i % 7 == 0 ? 1e-30f : 1.0f);
    grad[i] = i % 11 == 0 ? 0.0f : std::cos(static_cast<float>(3 * i)) * 1e-3f;
  }
  const std::vector<OptimizerSpec> specs = {
      {.name = "sgd"},
      {.name = "sgd", .weight_decay = 0.1},
      {.name = "sgd", .weight_decay = 0.1, .momentum = 0.9},
      {.name = "sgd", .momentum = 0.5, .nesterov = true},
      {.name = "adamw", .weight_decay = 0.01},
  };
  ThreadPool pool(3);
  for (const OptimizerSpec& spec : specs) {
    SCOPED_TRACE(spec.name + " momentum " + std::to_string(spec.momentum));
    std::vector<float> alone = start, threaded = start;
    auto one = make_optimizer(spec, table);
    auto many = make_optimizer(spec, table);
    many->set_thread_pool(&pool);
    for (int s = 0; s < 3; ++s) {
      one->step(alone, grad, 1e-2);
      many->step(threaded, grad, 1e-2);
    }
    EXPECT_EQ(checksum(alone), checksum(threaded));
    for (size_t k = 0; k < one->state().size(); ++k) {
      EXPECT_EQ(checksum(one->state()[k].flat()), checksum(many->state()[k].flat()));
    }
  }

  // AdamW against torch's formula written out here, one element at a time.
  std::vector<float> p = start, m(kCount, 0.0f), v(kCount, 0.0f), expected = start;
  auto adamw = make_optimizer({.name = "adamw", .weight_decay = 0.01}, table);
  const double lr = 1e-2, beta1 = 0.9, beta2 = 0.999;
  for (int s = 1; s <= 3; ++s) {
    adamw->step(p, grad, lr);
    const float decay = static_cast<float>(1.0 - lr * 0.01);
    const float c2 = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, s)));
    const float step = static_cast<float>(-(lr / (1.0 - std::pow(beta1, s))));
    for (int i = 0; i < kCount; ++i) {
      float& e = expected[i];
      e = e * decay;
      m[i] = m[i] * 0.9f + static_cast<float>(1.0 - beta1) * grad[i];
      v[i] = v[i] * 0.999f + static_cast<float>(1.0 - beta2) * grad[i] * grad[i];
      e = e + step * (m[i] / (std::sqrt(v[i]) / c2 + 1e-8f));
    }
  }
  EXPECT_EQ(checksum(p), checksum(expected));
}

TEST(LrSchedule, WarmupStepAndCosineByHand) {
  const LrScheduleSpec warmup{.name = "constant", .base_lr = 1e-3, .warmup_steps = 30};
  EXPECT_EQ(learning_rate(warmup, 0), 0.0);
  EXPECT_DOUBLE_EQ(learning_rate(warmup, 15), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(warmup, 30), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(warmup, 100000), 1e-3);
  const LrScheduleSpec step{.name = "step", .base_lr = 0.1, .step_size = 10, .gamma = 0.1};
  EXPECT_DOUBLE_EQ(learning_rate(step, 9), 0.1);
  EXPECT_NEAR(learning_rate(step, 25), 1e-3, 1e-15);
  const LrScheduleSpec cosine{.name = "cosine", .base_lr = 0.1, .total_steps = 100};
  EXPECT_DOUBLE_EQ(learning_rate(cosine, 0), 0.1);
  EXPECT_NEAR(learning_rate(cosine, 50), 0.05, 1e-15);
  EXPECT_EQ(learning_rate(cosine, 100), 0.0);
  EXPECT_EQ(learning_rate(cosine, 150), 0.0);
  EXPECT_THROW(validate({.name = "cosine", .total_steps = 0}), std::invalid_argument);
  EXPECT_THROW(validate({.name = "linear"}), std::invalid_argument);
  EXPECT_NO_THROW(validate(cosine));
}

TEST(GradClip, ScalesToMaxNormOnlyAbove) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(clip_grad_norm(g, 10.0), 5.0);
  EXPECT_EQ(g[0], 3.0f);
  EXPECT_DOUBLE_EQ(clip_grad_norm(g, 1.0), 5.0);
  EXPECT_NEAR(g[0], 0.6f, 1e-6f);
  EXPECT_NEAR(g[1], 0.8f, 1e-6f);
}

// Against PyTorch.

const testing::Fixture& fixture() {
  static const testing::Fixture f(DCTRAIN_SOURCE_DIR "/tests/fixtures/optimizer_fixture.bin");
  return f;
}

void expect_trajectory(const std::string& name, const OptimizerSpec& spec) {
  const auto& f = fixture();
  ParamTable table;
  table.add("a", {3, 4});
  table.add("b", {5});
  const auto& initial = f["initial"].values;
  const auto& grads = f["gradients"];
  const auto& lrs = f[name + ".lr"].values;
  const auto& expected = f[name + ".params"];
  ASSERT_EQ(initial.size(), table.total());
  std::vector<float> p(initial.begin(), initial.end());
  auto opt = make_optimizer(spec, table);
  const size_t steps = lrs.size(), count = table.total();
  for (size_t s = 0; s < steps; ++s) {
    std::vector<float> g(grads.values.begin() + s * count, grads.values.begin() + (s + 1) * count);
    opt->step(p, g, lrs[s]);
    for (size_t i = 0; i < count; ++i) {
      const double want = expected.values[s * count + i];
      // PyTorch's kernels may fuse a multiply-add; ours never do.
      ASSERT_NEAR(p[i], want, 2e-6 * std::max(1.0, std::abs(want)))
          << name << " step " << s << " element " << i;
    }
  }
}

TEST(OptimizerVsPyTorch, SgdMomentumWeightDecayCosine) {
  expect_trajectory("sgd_momentum", {.name = "sgd", .weight_decay = 5e-4, .momentum = 0.9});
}
TEST(OptimizerVsPyTorch, SgdNesterov) {
  expect_trajectory("sgd_nesterov",
                    {.name = "sgd", .weight_decay = 1e-2, .momentum = 0.9, .nesterov = true});
}
TEST(OptimizerVsPyTorch, SgdPlain) {
  expect_trajectory("sgd_plain", {.name = "sgd"});
}
TEST(OptimizerVsPyTorch, AdamWWithWarmup) {
  expect_trajectory("adamw", {.name = "adamw", .weight_decay = 0.01});
}
TEST(OptimizerVsPyTorch, AdamWOtherBetas) {
  expect_trajectory(
      "adamw_betas",
      {.name = "adamw", .weight_decay = 0.1, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6});
}

TEST(OptimizerVsPyTorch, SchedulesMatchTorchSchedulers) {
  const auto& f = fixture();
  auto expect = [&](const std::string& name, const LrScheduleSpec& spec) {
    const auto& lrs = f[name].values;
    for (size_t s = 0; s < lrs.size(); ++s) {
      EXPECT_NEAR(learning_rate(spec, static_cast<int64_t>(s)), lrs[s], 1e-12) << name << " " << s;
    }
  };
  expect("schedule.step", {.name = "step", .base_lr = 0.1, .step_size = 3, .gamma = 0.5});
  // CosineAnnealingLR(T_max=10) run for 12 steps: 0 at step 10; torch's
  // recursive form then climbs back (period 2 T_max), which is no use
  // for a run that ends at total_steps, so only the first 11 are compared.
  const LrScheduleSpec cosine{.name = "cosine", .base_lr = 0.1, .total_steps = 10};
  const auto& lrs = f["schedule.cosine"].values;
  for (int s = 0; s <= 10; ++s) EXPECT_NEAR(learning_rate(cosine, s), lrs[s], 1e-12) << s;
  expect("schedule.warmup", {.name = "constant", .base_lr = 0.1, .warmup_steps = 4});
}

TEST(OptimizerVsPyTorch, ClipGradNorm) {
  const auto& f = fixture();
  const auto& grads = f["gradients"].values;
  const auto& clipped = f["clip.clipped"].values;
  std::vector<float> g(grads.begin(), grads.begin() + static_cast<long>(clipped.size()));
  const double norm = clip_grad_norm(g, 1.0);
  EXPECT_NEAR(norm, f.scalar("clip.norm"), 1e-6 * norm);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], clipped[i], 1e-7) << i;
}

}  // namespace
}  // namespace dctrain
