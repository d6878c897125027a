// bert-tiny MLM training throughput: 32 sequences x 128 tokens, vocabulary
// 30,522, 19 masked positions per sequence, dropout 0.1, AdamW; 1 and 2
// threads. GFLOP/s counts 6.25 MFLOP per training token and is quoted as a
// fraction of cblas_sgemm (2048^3) measured in the same run.
// bench/bert_vs_pytorch.sh runs this beside PyTorch and prints the ratios.
//
//   bench_engine_bert_tiny [STEPS] [LAYERS HIDDEN HEADS INTERMEDIATE]
//
// Four sizes after the steps bench another member of the BERT family (e.g.
// 4 256 4 1024, BERT-mini; bench/sizes_vs_pytorch.sh); GFLOP/s is then not
// printed (the 6.25 MFLOP are bert-tiny's).
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/batches.h"
#include "bench/sgemm_reference.h"
#include "model/bert_tiny.h"
#include "model/optimizer.h"

namespace {

using dctrain::Batch;

constexpr int kBatch = 32, kSeq = dctrain::bench::kMlmSeq, kVocab = dctrain::bench::kMlmVocab,
              kMasked = dctrain::bench::kMlmMasked;
constexpr double kFlopPerToken = 6.25e6;

double tokens_per_second(dctrain::ModelSpec spec, int threads, int steps, const Batch& batch) {
  spec.threads = threads;
  dctrain::BertTiny model(spec);
  auto adamw = dctrain::make_optimizer({.name = "adamw", .weight_decay = 0.01}, model.table());
  auto step = [&] {
    model.gradients().zero();
    const auto r = model.train_micro_batch(batch);
    const auto scale = static_cast<float>(1.0 / static_cast<double>(r.loss_terms));
    for (float& g : model.gradients().flat()) g *= scale;
    adamw->step(model.parameters().flat(), model.gradients().flat(), 1e-3);
    return r;
  };
  step();  // warm-up: workspace, page faults
  double best = 1e30;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    best = std::min(best, dctrain::bench::seconds_since(t0));
  }
  return kBatch * kSeq / best;
}

}  // namespace

int main(int argc, char** argv) {
  dctrain::bench::settle_and_print_blas(argv);
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  dctrain::ModelSpec spec{.name = "bert-tiny", .seed = 1, .vocab_size = kVocab};
  if (argc == 6) {
    spec.name = "bert";
    spec.layers = std::atoi(argv[2]);
    spec.hidden = std::atoi(argv[3]);
    spec.heads = std::atoi(argv[4]);
    spec.intermediate = std::atoi(argv[5]);
  } else if (argc > 2) {
    std::fprintf(stderr,
                 "usage: bench_engine_bert_tiny [STEPS] [LAYERS HIDDEN HEADS INTERMEDIATE]\n");
    return 2;
  }
  const bool tiny = spec.name == "bert-tiny";
  const Batch batch = dctrain::bench::mlm_sequences(kBatch);
  std::printf(
      "%s MLM training, %d x %d tokens, vocab %d, %d masked per sequence, dropout "
      "0.1, AdamW; best of %d steps (machine shared: figures are noisy)\n",
      dctrain::BertTiny(spec).name().c_str(), kBatch, kSeq, kVocab, kMasked, steps);
  for (int threads : {1, 2}) {
    const double peak = dctrain::bench::sgemm_gflops(2048, threads, 3);
    const double tps = tokens_per_second(spec, threads, steps, batch);
    const double gflops = tps * kFlopPerToken * 1e-9;
    if (tiny) {
      std::printf(
          "threads %d: %8.0f tok/s  %6.1f GFLOP/s  = %4.1f%% of sgemm peak (%.1f GFLOP/s)\n",
          threads, tps, gflops, 100.0 * gflops / peak, peak);
    } else {
      std::printf("threads %d: %8.0f tok/s\n", threads, tps);
    }
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("peak resident memory: %.1f MiB\n", static_cast<double>(usage.ru_maxrss) / 1024.0);
  return 0;
}
