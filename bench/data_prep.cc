// Data preparation against compute: the time to fill a resnet20 micro-batch
// of 32 CIFAR images (normalise + random crop + flip) and a bert-tiny
// micro-batch of 8 x 128 tokens (pack + mask), each as a fraction of the
// engine's training compute (forward + backward) on that same micro-batch,
// measured in this run on one thread. Target: under 5%.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "bench/sgemm_reference.h"
#include "common/random.h"
#include "data/dataset_factory.h"
#include "data/image_dataset.h"
#include "data/io.h"
#include "data/synthetic.h"
#include "model/model.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of one training forward + backward of `model` on `batch`.
double median_compute_seconds(dctrain::Model& model, const dctrain::Batch& batch, int repeats) {
  model.train_micro_batch(batch);  // warm-up: workspace for this shape
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    model.gradients().zero();
    model.statistics().zero();
    const auto t0 = Clock::now();
    model.train_micro_batch(batch);
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return times[static_cast<size_t>(repeats / 2)];
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
  dctrain::bench::settle_and_print_blas(argv);

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

    const double image_prep = median_fill_seconds(*images, 32, repeats, true);
    const double text_prep = median_fill_seconds(*text, 8, repeats, true);

    // Compute on a micro-batch this dataset produced, with the model sized to it.
    std::vector<uint64_t> ids(32);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
    const dctrain::SampleContext context{.seed = 1, .epoch = 0, .train = true};
    const dctrain::Batch image_batch = images->make_batch(ids, context);
    ids.resize(8);
    const dctrain::Batch text_batch = text->make_batch(ids, context);

    dctrain::ModelSpec resnet;
    resnet.name = "resnet20";
    const double image_compute =
        median_compute_seconds(*dctrain::make_model(resnet), image_batch, 9);
    dctrain::ModelSpec bert;
    bert.name = "bert-tiny";
    bert.vocab_size = text->shape().vocab_size;
    bert.max_seq_len = text_batch.seq_len;
    const double text_compute = median_compute_seconds(*dctrain::make_model(bert), text_batch, 9);

    std::printf("\n%-34s %12s %14s %10s\n", "micro-batch", "prep (ms)", "compute (ms)", "ratio");
    std::printf("%-34s %12.4f %14.1f %9.3f%%\n", "resnet20, 32 images, augmented", image_prep * 1e3,
                image_compute * 1e3, 100.0 * image_prep / image_compute);
    std::printf("%-34s %12.4f %14.1f %9.3f%%\n", "bert-tiny, 8 x 128 tokens, masked",
                text_prep * 1e3, text_compute * 1e3, 100.0 * text_prep / text_compute);
    std::printf(
        "\nprep: median over %d micro-batches of random ids, one thread. compute: median of 9 "
        "training\nforward + backward passes of the engine on one thread (bert-tiny with "
        "vocab %d). Target: under 5%%.\n",
        repeats, bert.vocab_size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_data_prep: %s\n", e.what());
    return 1;
  }
  return 0;
}
