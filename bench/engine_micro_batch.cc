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
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/batches.h"
#include "bench/sgemm_reference.h"
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

int parse_int(const char* flag, const char* value) {
  char* end = nullptr;
  const long v = value != nullptr ? std::strtol(value, &end, 10) : 0;
  if (value == nullptr || *end != '\0' || v < 1 || v > 4096) {
    std::fprintf(stderr, "bench_engine_micro_batch: %s needs a positive integer\n", flag);
    std::exit(2);
  }
  return static_cast<int>(v);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

int main(int argc, char** argv) {
  dctrain::bench::settle_and_print_blas(argv);
  std::vector<std::string> models;
  int batch = 128, micro = 16, threads = 1, rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (std::strcmp(arg, "--model") == 0 && value != nullptr) {
      models.emplace_back(value);
    } else if (std::strcmp(arg, "--batch") == 0) {
      batch = parse_int(arg, value);
    } else if (std::strcmp(arg, "--micro") == 0) {
      micro = parse_int(arg, value);
    } else if (std::strcmp(arg, "--threads") == 0) {
      threads = parse_int(arg, value);
    } else if (std::strcmp(arg, "--rounds") == 0) {
      rounds = parse_int(arg, value);
    } else {
      std::fprintf(stderr,
                   "usage: bench_engine_micro_batch [--model resnet20|bert-tiny]... [--batch B] "
                   "[--micro M] [--threads N] [--rounds R]\n");
      return 2;
    }
    ++i;
  }
  if (models.empty()) models = {"resnet20", "bert-tiny"};
  if (batch % micro != 0) {
    std::fprintf(stderr, "bench_engine_micro_batch: --batch must be a multiple of --micro\n");
    return 2;
  }
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
    Batch whole;
    if (name == "bert-tiny") {
      whole = dctrain::bench::mlm_sequences(batch);
    } else if (name == "resnet20") {
      whole = dctrain::bench::cifar_images(batch);
    } else {
      std::fprintf(stderr, "bench_engine_micro_batch: unknown model '%s'\n", name.c_str());
      return 2;
    }
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
    std::printf("%-10s %14.1f %14.1f %8.3f %4.3f-%4.3f\n", name.c_str(), median(whole_rates),
                median(micro_rates), median(ratios), *lo, *hi);
    std::printf("RESULT model=%s batch=%d micro=%d threads=%d ratio=%.3f\n", name.c_str(), batch,
                micro, threads, median(ratios));
  }
  return 0;
}
