// The engine at DropCompute's micro-batches against the engine at the whole
// batch: the same samples trained as one call of `--batch` and as
// `--batch / --micro` calls of `--micro` (forward, loss, backward into the
// gradient arena), for ResNet-20 (CIFAR-10 shape) and bert-tiny (128 tokens,
// 19 masked). Each round runs the two back to back, in alternating order,
// so that a busy machine weighs on both alike; the figure is the median
// over rounds of the per-round ratio (micro-batched samples/s over
// whole-batch samples/s: 1.0 is as efficient per sample).
//
//   bench_engine_micro_batch [--model resnet20|bert-tiny]... [--batch B] [--micro M]
//                            [--threads N] [--rounds R]
// (default: both models, batch 128 in micro-batches of 16, one thread,
// 5 rounds after one warm-up round).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/batches.h"
#include "bench/sgemm_reference.h"
#include "common/median.h"
#include "model/model.h"

namespace {

using dctrain::Batch;
using dctrain::bench::seconds_since;

// Samples [begin, begin + n) of `whole`.
Batch slice(const Batch& whole, int begin, int n) {
  Batch b;
  b.kind = whole.kind;
  b.size = n;
  const auto part = [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if (v.empty()) return V();
    const size_t each = v.size() / static_cast<size_t>(whole.size);
    return V(v.begin() + static_cast<std::ptrdiff_t>(each * begin),
             v.begin() + static_cast<std::ptrdiff_t>(each * (begin + n)));
  };
  b.channels = whole.channels;
  b.height = whole.height;
  b.width = whole.width;
  b.seq_len = whole.seq_len;
  b.images = part(whole.images);
  b.tokens = part(whole.tokens);
  b.token_types = part(whole.token_types);
  b.attention = part(whole.attention);
  b.labels = part(whole.labels);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models = {"resnet20", "bert-tiny"};
  int batch = 128, micro = 16, threads = 1, rounds = 5;
  CLI::App app{"The engine at micro-batches against the engine at the whole batch"};
  app.add_option("--model", models, "models to run")
      ->check(CLI::IsMember({"resnet20", "bert-tiny"}))
      ->capture_default_str();
  app.add_option("--batch", batch, "samples of the whole batch")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--micro", micro, "samples of a micro-batch (divides --batch)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--threads", threads, "the model's compute threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--rounds", rounds, "timed rounds after one warm-up")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (batch % micro != 0) {
    std::fprintf(stderr, "bench_engine_micro_batch: --batch must be a multiple of --micro\n");
    return 2;
  }
  dctrain::bench::settle_and_print_blas(argv);
  std::printf("batch %d as one call against %d calls of %d, %d thread(s), median of %d rounds\n",
              batch, batch / micro, micro, threads, rounds);
  std::printf("%-10s %14s %14s %8s %10s\n", "model", "whole/s", "micro/s", "ratio", "spread");
  for (const std::string& name : models) {
    dctrain::ModelSpec spec;
    spec.name = name;
    spec.seed = 1;
    spec.threads = threads;
    spec.vocab_size = dctrain::bench::kMlmVocab;
    spec.max_seq_len = dctrain::bench::kMlmSeq;
    const Batch whole = name == "bert-tiny" ? dctrain::bench::mlm_sequences(batch)
                                            : dctrain::bench::cifar_images(batch);
    std::vector<Batch> parts;
    for (int b = 0; b < batch; b += micro) parts.push_back(slice(whole, b, micro));
    const std::unique_ptr<dctrain::Model> model = dctrain::make_model(spec);
    const auto time_whole = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      model->train_micro_batch(whole);
      return seconds_since(t0);
    };
    const auto time_parts = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      for (const Batch& part : parts) model->train_micro_batch(part);
      return seconds_since(t0);
    };
    time_whole();  // warm-up: workspaces for both sizes
    time_parts();
    std::vector<double> whole_rates, micro_rates, ratios;
    for (int r = 0; r < rounds; ++r) {
      double w = 0.0, m = 0.0;
      if (r % 2 == 0) {
        w = time_whole();
        m = time_parts();
      } else {
        m = time_parts();
        w = time_whole();
      }
      whole_rates.push_back(batch / w);
      micro_rates.push_back(batch / m);
      ratios.push_back(w / m);
    }
    const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
    std::printf("%-10s %14.1f %14.1f %8.3f %4.3f-%4.3f\n", name.c_str(),
                dctrain::median(whole_rates), dctrain::median(micro_rates), dctrain::median(ratios),
                *lo, *hi);
    std::printf("RESULT model=%s batch=%d micro=%d threads=%d ratio=%.3f\n", name.c_str(), batch,
                micro, threads, dctrain::median(ratios));
  }
  return 0;
}
