// ResNet-20 training-step throughput of the dctrain engine: images/s at batch
// 128 (forward, loss, backward into the gradient arena), the GFLOP/s that
// makes (243.3 MFLOP per training image) as a fraction of cblas_sgemm's peak
// measured in the same run, a per-layer-kind time breakdown, and the
// process's peak resident memory. bench/engine_vs_pytorch.sh runs it beside
// PyTorch on the same model, batch and threads and prints the ratios.
//
//   bench_engine_resnet20 [--threads N]... [--batch B] [--steps S]
// (default: threads 1 and 2, batch 128, 4 timed steps after one warm-up).
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/batches.h"
#include "bench/sgemm_reference.h"
#include "model/image_classifier.h"
#include "model/model.h"

namespace {

using dctrain::Batch;

constexpr double kTrainMflopPerImage = 243.3;

int parse_int(const char* flag, const char* value) {
  char* end = nullptr;
  const long v = value != nullptr ? std::strtol(value, &end, 10) : 0;
  if (value == nullptr || *end != '\0' || v < 1 || v > 4096) {
    std::fprintf(stderr, "bench_engine_resnet20: %s needs a positive integer\n", flag);
    std::exit(2);
  }
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  dctrain::bench::settle_and_print_blas(argv);
  std::vector<int> thread_counts;
  int batch_size = 128, steps = 4, depth = 20, width = 16;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg == "--threads") {
      thread_counts.push_back(parse_int("--threads", value));
      ++i;
    } else if (arg == "--batch") {
      batch_size = parse_int("--batch", value);
      ++i;
    } else if (arg == "--steps") {
      steps = parse_int("--steps", value);
      ++i;
    } else if (arg == "--depth") {
      depth = parse_int("--depth", value);
      ++i;
    } else if (arg == "--width") {
      width = parse_int("--width", value);
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: bench_engine_resnet20 [--threads N]... [--batch B] [--steps S] "
                   "[--depth D] [--width W]\n");
      return 2;
    }
  }
  if (thread_counts.empty()) thread_counts = {1, 2};

  // Another size of the family: no GFLOP/s (the MFLOP per image are
  // resnet20's).
  const bool resnet20 = depth == 20 && width == 16;
  std::printf(
      "resnet%d%s training step, batch %d, %d timed steps after 1 warm-up "
      "(machine shared: figures are noisy)\n",
      depth, width == 16 ? "" : ("-w" + std::to_string(width)).c_str(), batch_size, steps);
  const Batch batch = dctrain::bench::cifar_images(batch_size);
  for (int threads : thread_counts) {
    const double peak = dctrain::bench::sgemm_gflops(1024, threads, 5);
    dctrain::ModelSpec spec;
    spec.name = "resnet";
    spec.depth = depth;
    spec.width = width;
    spec.threads = threads;
    auto model = dctrain::make_model(spec);  // sets OpenBLAS back to 1 thread
    model->train_micro_batch(batch);         // warm-up: workspace, page faults
    const auto warm = dctrain::classifier_timings(*model);
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) {
      model->gradients().zero();
      model->statistics().zero();
      model->train_micro_batch(batch);
    }
    const double seconds = dctrain::bench::seconds_since(t0);
    const double images_per_second = batch_size * steps / seconds;
    const double gflops = images_per_second * kTrainMflopPerImage * 1e-3;
    if (resnet20) {
      std::printf(
          "threads %d: %.1f img/s, %.1f GFLOP/s = %.0f%% of cblas_sgemm peak %.1f GFLOP/s\n",
          threads, images_per_second, gflops, 100.0 * gflops / peak, peak);
    } else {
      std::printf("threads %d: %.1f img/s\n", threads, images_per_second);
    }
    std::printf("RESULT threads=%d img_per_s=%.2f\n", threads, images_per_second);

    // Where the time goes, per kind of operation (timed steps only).
    const auto timed = dctrain::classifier_timings(*model);
    std::map<std::string, std::pair<double, double>> by_kind;
    double total = 0.0;
    for (size_t i = 0; i < timed.size(); ++i) {
      auto& k = by_kind[timed[i].kind];
      k.first += timed[i].forward_seconds - warm[i].forward_seconds;
      k.second += timed[i].backward_seconds - warm[i].backward_seconds;
      total += timed[i].forward_seconds - warm[i].forward_seconds + timed[i].backward_seconds -
               warm[i].backward_seconds;
    }
    std::printf("  %-22s %9s %9s %6s\n", "per step, ms", "forward", "backward", "share");
    for (const auto& [kind, t] : by_kind) {
      std::printf("  %-22s %9.2f %9.2f %5.1f%%\n", kind.c_str(), 1e3 * t.first / steps,
                  1e3 * t.second / steps, 100.0 * (t.first + t.second) / total);
    }
    std::printf("  %-22s %9.2f (step wall %.2f ms)\n", "total", 1e3 * total / steps,
                1e3 * seconds / steps);
    // Per conv layer, in model order.
    std::printf("  %-22s %9s %9s\n", "conv layer, ms", "forward", "backward");
    for (size_t i = 0; i < timed.size(); ++i) {
      if (timed[i].kind != "conv") continue;
      std::printf("  %-22s %9.2f %9.2f\n", timed[i].layer.c_str(),
                  1e3 * (timed[i].forward_seconds - warm[i].forward_seconds) / steps,
                  1e3 * (timed[i].backward_seconds - warm[i].backward_seconds) / steps);
    }
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("peak resident memory: %.1f MiB\n", static_cast<double>(usage.ru_maxrss) / 1024.0);
  return 0;
}
