// Data preparation against compute: the time to fill a resnet20 micro-batch
// of 32 CIFAR images (normalise + random crop + flip) and a bert-tiny
// micro-batch of 8 x 128 tokens (pack + mask), each as a fraction of that
// micro-batch's training compute. Target: under 5%.
//
// Until the model engine exists, the baseline is the compute time the model
// would take at this machine's 1-thread cblas_sgemm speed, measured in this
// run: the model's FLOPs / sgemm FLOP/s. Real compute is slower than sgemm
// peak, so the printed ratio is an upper bound on the real one.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "common/random.h"
#include "data/dataset_factory.h"
#include "data/image_dataset.h"
#include "data/io.h"
#include "data/synthetic.h"

namespace {

using Clock = std::chrono::steady_clock;

// Model facts (FLOPs per training sample, forward + backward).
constexpr double kResnet20FlopsPerImage = 243.3e6;
constexpr double kBertTinyFlopsPerToken = 6.25e6;  // MLM head on the ~15% masked positions

double sgemm_flops_per_second() {
  openblas_set_num_threads(1);
  constexpr int n = 1024;
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  auto once = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
  };
  once();
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    once();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * n * n * static_cast<double>(n) / best;
}

// Median seconds to fill a micro-batch of `batch` random ids.
double median_fill_seconds(const dctrain::Dataset& dataset, int batch, int repeats, bool train) {
  dctrain::Batch out;
  std::vector<uint64_t> ids(static_cast<size_t>(batch));
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    dctrain::Rng rng({17, static_cast<uint64_t>(r)});
    for (auto& id : ids) id = rng.below(dataset.size());
    const dctrain::SampleContext context{
        .seed = 1, .epoch = static_cast<uint64_t>(r), .train = train};
    const auto t0 = Clock::now();
    dataset.fill(ids, context, out);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return times[static_cast<size_t>(repeats / 2)];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Data preparation time per micro-batch, against model compute"};
  std::string data_root;
  int repeats = 2000;
  app.add_option("--data-root", data_root,
                 "data root laid out like ../shared/data (CIFAR-10 and tinyshakespeare + BERT "
                 "vocab); empty: the synthetic datasets")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "micro-batches timed per dataset")
      ->check(CLI::Range(10, 1000000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    std::unique_ptr<dctrain::Dataset> images, text;
    if (!data_root.empty()) {
      dctrain::DatasetSpec spec;
      spec.kind = "cifar10";
      images = dctrain::make_dataset(spec, data_root);
      spec.kind = "text-mlm";
      text = dctrain::make_dataset(spec, data_root);
    } else {
      // Synthetic 3x32x32 images given CIFAR's transform, so the crop and flip run.
      dctrain::SyntheticImageOptions options;
      options.samples = 4000;
      images = std::make_unique<dctrain::ImageDataset>("synthetic-images with cifar10 augmentation",
                                                       dctrain::generate_synthetic_images(options),
                                                       10, dctrain::cifar10_transform(true));
      dctrain::DatasetSpec spec;
      spec.kind = "synthetic-text";
      text = dctrain::make_dataset(spec, "");
    }
    std::printf("images: %s\ntext:   %s\n", images->describe().c_str(), text->describe().c_str());

    const double flops = sgemm_flops_per_second();
    std::printf("baseline: 1-thread cblas_sgemm 1024^3, best of 5: %.1f GFLOP/s (measured now)\n",
                flops * 1e-9);

    const double image_prep = median_fill_seconds(*images, 32, repeats, true);
    const double image_compute = 32 * kResnet20FlopsPerImage / flops;
    const double text_prep = median_fill_seconds(*text, 8, repeats, true);
    const double text_compute = 8 * 128 * kBertTinyFlopsPerToken / flops;

    std::printf("\n%-34s %12s %22s %10s\n", "micro-batch", "prep (ms)", "compute at sgemm (ms)",
                "ratio");
    std::printf("%-34s %12.4f %22.1f %9.3f%%\n", "resnet20, 32 images, augmented", image_prep * 1e3,
                image_compute * 1e3, 100.0 * image_prep / image_compute);
    std::printf("%-34s %12.4f %22.1f %9.3f%%\n", "bert-tiny, 8 x 128 tokens, masked",
                text_prep * 1e3, text_compute * 1e3, 100.0 * text_prep / text_compute);
    std::printf(
        "\nprep: median over %d micro-batches of random ids, one thread. compute: the "
        "model's training FLOPs\n(resnet20 243.3 MFLOP/image, bert-tiny 6.25 MFLOP/token) "
        "at the sgemm speed above, a lower bound\nof real compute, so each ratio is an "
        "upper bound. Target: under 5%%.\n",
        repeats);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_data_prep: %s\n", e.what());
    return 1;
  }
  return 0;
}
