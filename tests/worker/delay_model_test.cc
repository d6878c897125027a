// The injected delays a worker adds after each micro-batch.
#include "worker/delay_model.h"

#include <gtest/gtest.h>

namespace dctrain {
namespace {

v1::DelayConfig constant_with_slow_rank(double seconds, double slowdown) {
  v1::DelayConfig c;
  c.set_kind(v1::DELAY_CONSTANT);
  c.set_seconds(seconds);
  c.add_slow_workers(1);
  c.set_slowdown(slowdown);
  return c;
}

TEST(DelayModel, ASlowWorkerTakesSlowdownTimesTheWholeMicroBatch) {
  // Compute 0.01 s and an injected 0.03 s: a worker 4x slower takes 0.16 s
  // in all, so 0.15 s after its compute; the others 0.03 s.
  const v1::DelayConfig c = constant_with_slow_rank(0.03, 4.0);
  DelayModel fast(c, 0);
  DelayModel slow(c, 1);
  EXPECT_DOUBLE_EQ(fast.delay_after(0.01), 0.03);
  EXPECT_NEAR(0.01 + slow.delay_after(0.01), 4.0 * (0.01 + 0.03), 1e-15);
}

TEST(DelayModel, WithoutAnInjectedDelayTheSlowdownStretchesTheCompute) {
  v1::DelayConfig c;
  c.add_slow_workers(0);
  c.set_slowdown(2.0);
  DelayModel slow(c, 0);
  EXPECT_DOUBLE_EQ(slow.delay_after(0.05), 0.05);
}

TEST(DelayModel, DropComputeDelayOverAComputeStandIn) {
  // With seconds s the micro-batch is the paper's model over a compute of
  // t + s: s slept, then X (t + s) / 2, the same draws as a model without
  // the stand-in whose compute took t + s.
  v1::DelayConfig plain;
  plain.set_kind(v1::DELAY_DROPCOMPUTE);
  plain.set_factor(1.0);
  plain.set_seed(7);
  v1::DelayConfig standing = plain;
  standing.set_seconds(0.05);
  DelayModel a(plain, 2);
  DelayModel b(standing, 2);
  for (int i = 0; i < 100; ++i) {
    const double t = 0.001 * (i % 7);
    EXPECT_NEAR(b.delay_after(t), 0.05 + a.delay_after(t + 0.05), 1e-15) << i;
  }
}

}  // namespace
}  // namespace dctrain
