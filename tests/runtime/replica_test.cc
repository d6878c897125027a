// A replica applying the exchange's summed gradient (averaged inside the
// optimizer's pass) gets the bits of one applying the averaged gradient, as
// the star's update carries it; with clipping too, whose norm is the
// averaged gradient's.
#include "runtime/replica.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "comm/framing.h"
#include "tests/testing/softmax_model.h"

namespace dctrain {
namespace {

std::unique_ptr<Replica> softmax_replica(const v1::OptimizerConfig& optimizer) {
  return std::make_unique<Replica>(std::make_unique<testing::SoftmaxModel>(48, 5, 7), optimizer);
}

TEST(Replica, ASummedUpdateGivesTheBitsOfTheAveragedOne) {
  for (const bool clipped : {false, true}) {
    for (const v1::OptimizerKind kind : {v1::OPTIMIZER_SGD, v1::OPTIMIZER_ADAMW}) {
      SCOPED_TRACE(std::string(clipped ? "clipped " : "") +
                   (kind == v1::OPTIMIZER_SGD ? "sgd" : "adamw"));
      v1::OptimizerConfig optimizer;
      optimizer.set_kind(kind);
      optimizer.set_lr(0.05);
      optimizer.mutable_schedule()->set_kind(v1::SCHEDULE_CONSTANT);
      optimizer.set_momentum(kind == v1::OPTIMIZER_SGD ? 0.9 : 0.0);
      optimizer.set_weight_decay(0.01);
      // The averaged gradient's norm is about 2: clipping to 0.5 scales it.
      if (clipped) optimizer.set_clip_norm(0.5);
      auto averaged = softmax_replica(optimizer);
      auto summed = softmax_replica(optimizer);
      ASSERT_EQ(averaged->parameter_checksum(), summed->parameter_checksum());
      const size_t n = averaged->parameter_count();
      const float divisor = 7.0f;  // 1/7 is inexact: a multiply would change bits
      const std::vector<float> statistics = {0.25f, 0.5f};
      for (int step = 0; step < 3; ++step) {
        std::vector<float> sum(n);
        for (size_t i = 0; i < n; ++i) sum[i] = std::sin(static_cast<float>(i + 31 * step)) * 1.3f;
        std::vector<float> average = sum;
        for (float& g : average) g /= divisor;
        // Each returns the checksum of what it wrote, as read afterwards.
        const uint64_t averaged_wrote = averaged->apply_update(average, statistics, 0.05);
        const uint64_t summed_wrote = summed->apply_summed_update(sum, divisor, statistics, 0.05);
        EXPECT_EQ(averaged_wrote, averaged->parameter_checksum());
        EXPECT_EQ(summed_wrote, summed->parameter_checksum());
        EXPECT_EQ(averaged->parameter_checksum(), summed->parameter_checksum()) << "step " << step;
      }
      const auto a = averaged->state_views(), s = summed->state_views();
      ASSERT_EQ(a.size(), s.size());
      for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(checksum(a[k]), checksum(s[k])) << k;
    }
  }
}

}  // namespace
}  // namespace dctrain
