// The optimizer step against the memory traffic it cannot avoid. AdamW reads
// the parameters, the gradient and both moments and writes back three of
// them; SGD with momentum reads three arrays and writes two. The baseline is
// copying the same arrays (each read once, written once) with memcpy, timed
// in the same run on the same buffers, so the ratio says how close the step
// is to the memory bandwidth it needs. Sizes: bert-tiny (4,367,546
// parameters) and resnet20 (269,722). Then, from a summed gradient, the
// division in a pass of its own against inside the step; and the replica's
// checksum read after the step against hashed inside it, block by block,
// with the arrays in cache and from cold caches (as after a step's compute).
//
//   bench_optimizer_step [--threads N] [--repeats R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/sgemm_reference.h"
#include "model/optimizer.h"
#include "model/param_table.h"
#include "model/thread_pool.h"

namespace dctrain {
namespace {

using Clock = std::chrono::steady_clock;

template <typename Fn>
double best_seconds(int repeats, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

// Like best_seconds, with the caches emptied before each run (a write of
// 512 MiB, more than any last-level cache here, not timed): as in a real
// step, where the compute has evicted the optimizer's arrays since the last
// update.
template <typename Fn>
double best_cold_seconds(int repeats, Fn&& fn) {
  static std::vector<char> scratch(size_t{512} << 20);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    std::memset(scratch.data(), r, scratch.size());
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

// Copies `arrays` arrays of n floats each, once each: the floor for a step
// that reads and writes them.
double copy_seconds(size_t n, int arrays, int repeats) {
  std::vector<std::vector<float>> from(arrays, std::vector<float>(n, 1.0f));
  std::vector<std::vector<float>> to(arrays, std::vector<float>(n, 0.0f));
  return best_seconds(repeats, [&] {
    for (int a = 0; a < arrays; ++a) std::memcpy(to[a].data(), from[a].data(), n * sizeof(float));
  });
}

void measure(const char* model, size_t n, const std::string& kind, ThreadPool* pool, int repeats) {
  ParamTable table;
  table.add("weights", {static_cast<int64_t>(n)});
  Arena parameters(table), gradients(table);
  std::fill(parameters.flat().begin(), parameters.flat().end(), 0.5f);
  std::fill(gradients.flat().begin(), gradients.flat().end(), 0.01f);
  OptimizerSpec spec;
  spec.name = kind;
  spec.momentum = 0.9;
  spec.weight_decay = 0.01;
  std::unique_ptr<Optimizer> optimizer = make_optimizer(spec, table);
  optimizer->set_thread_pool(pool);
  // Every later step's path: SGD's first step writes its momentum buffer
  // without reading it, and best-of-n would time only that one.
  optimizer->step(parameters.flat(), gradients.flat(), 1e-3);
  const double step =
      best_seconds(repeats, [&] { optimizer->step(parameters.flat(), gradients.flat(), 1e-3); });
  // AdamW touches 4 arrays, SGD with momentum 3.
  const int arrays = kind == "adamw" ? 4 : 3;
  const double copy = copy_seconds(n, arrays, repeats);
  std::printf("%-9s %-6s %9zu params: step %7.2f ms, copy of its %d arrays %7.2f ms, ratio %.2fx\n",
              model, kind.c_str(), n, step * 1e3, arrays, copy * 1e3, step / copy);
  // From a summed gradient (the exchange's commit): averaging it in a pass
  // of its own and then stepping, against the division inside the step. The
  // gradient is refilled before each: dividing in place changes it.
  const float divisor = 8.0f;
  std::vector<float> summed(n, 0.08f);
  const double separate = best_seconds(repeats, [&] {
    std::copy(summed.begin(), summed.end(), gradients.flat().begin());
    for (float& g : gradients.flat()) g /= divisor;
    optimizer->step(parameters.flat(), gradients.flat(), 1e-3);
  });
  const double folded = best_seconds(repeats, [&] {
    std::copy(summed.begin(), summed.end(), gradients.flat().begin());
    optimizer->step(parameters.flat(), gradients.flat(), 1e-3, divisor);
  });
  std::printf(
      "%-9s %-6s %9zu params: from a sum, divide then step %7.2f ms, divided in the step "
      "%7.2f ms (both after a refill of the gradient), ratio %.2fx\n",
      model, kind.c_str(), n, separate * 1e3, folded * 1e3, folded / separate);
  // The replica's checksum after the update (each step's report carries
  // it): read in a pass of its own, against hashed block by block inside
  // the step while the block is in cache.
  std::vector<uint64_t> blocks(checksum_blocks(n));
  uint64_t sink = 0;
  const auto step_then_read = [&] {
    optimizer->step(parameters.flat(), gradients.flat(), 1e-3);
    sink ^= block_checksum(parameters.flat());
  };
  const auto step_hashed = [&] {
    optimizer->step(parameters.flat(), gradients.flat(), 1e-3, 1.0f, blocks);
    sink ^= combine_block_checksums(blocks, n);
  };
  const double then_read = best_seconds(repeats, step_then_read);
  const double hashed = best_seconds(repeats, step_hashed);
  // The same from cold caches, as after a step's compute.
  const double then_read_cold = best_cold_seconds(repeats, step_then_read);
  const double hashed_cold = best_cold_seconds(repeats, step_hashed);
  std::printf(
      "%-9s %-6s %9zu params: step then checksum %7.2f ms, checksum hashed in the step %7.2f ms, "
      "ratio %.2fx; from cold caches %7.2f ms and %7.2f ms, ratio %.2fx%s\n",
      model, kind.c_str(), n, then_read * 1e3, hashed * 1e3, hashed / then_read,
      then_read_cold * 1e3, hashed_cold * 1e3, hashed_cold / then_read_cold,
      sink == 42 ? " " : "");
}

}  // namespace
}  // namespace dctrain

int main(int argc, char** argv) {
  using namespace dctrain;
  int threads = 1, repeats = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads")
      threads = std::stoi(argv[i + 1]);
    else if (flag == "--repeats")
      repeats = std::stoi(argv[i + 1]);
  }
  bench::settle_and_print_blas(argv);
  std::printf(
      "optimizer step vs memcpy of the arrays it reads and writes, best of %d, %d "
      "thread(s) for the step, 1 for memcpy (machine shared: figures are noisy)\n",
      repeats, threads);
  std::unique_ptr<ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
  for (const char* kind : {"adamw", "sgd"}) {
    measure("bert-tiny", 4367546, kind, pool.get(), repeats);
    measure("resnet20", 269722, kind, pool.get(), repeats);
  }
  return 0;
}
