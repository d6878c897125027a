#include "data/dataset_factory.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include "data/image_dataset.h"
#include "data/io.h"
#include "data/synthetic.h"
#include "data/text_mlm.h"
#include "data/wordpiece.h"

namespace dctrain {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> resolve(const std::vector<std::string>& files, const fs::path& root) {
  std::vector<fs::path> paths;
  for (const auto& f : files) paths.push_back(root / f);
  return paths;
}

// The IDX file `name` in `dir`, gzip'd or not, whichever exists.
fs::path idx_file(const fs::path& dir, const std::string& name) {
  const fs::path gz = dir / (name + ".gz");
  if (fs::exists(gz)) return gz;
  const fs::path plain = dir / name;
  if (fs::exists(plain)) return plain;
  return gz;  // missing either way: the error names the usual one
}

std::unique_ptr<Dataset> make_idx(const DatasetSpec& spec, const fs::path& root) {
  const bool fashion = spec.kind == "fashion-mnist";
  std::vector<fs::path> files;
  if (spec.files.empty()) {
    const fs::path dir = root / (fashion ? "fashion-mnist" : "mnist");
    const std::string prefix = spec.split == Split::kTrain ? "train" : "t10k";
    files = {idx_file(dir, prefix + "-images-idx3-ubyte"),
             idx_file(dir, prefix + "-labels-idx1-ubyte")};
  } else {
    if (spec.files.size() != 2) {
      throw std::invalid_argument(fmt::format("{}: {} files given, expected 2 (images, labels)",
                                              spec.kind, spec.files.size()));
    }
    files = resolve(spec.files, root);
  }
  ImageSet set = read_idx(files[0], files[1]);
  return std::make_unique<ImageDataset>(fmt::format("{} {}", spec.kind, split_name(spec.split)),
                                        std::move(set), 10,
                                        fashion ? fashion_mnist_transform() : mnist_transform());
}

// The batches of a CIFAR-10 folder for the split, sorted by name.
std::vector<fs::path> default_cifar_files(const fs::path& root, Split split) {
  const std::string prefix = split == Split::kTrain ? "data_batch_" : "test_batch";
  for (const char* folder : {"cifar-10-batches-bin", "cifar-10-partial"}) {
    const fs::path dir = root / folder;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && name.starts_with(prefix) && name.ends_with(".bin")) {
        files.push_back(entry.path());
      }
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      throw DataError(
          fmt::format("{}: no {}*.bin batch files — copy the CIFAR-10 binary version "
                      "there (cifar-10-binary.tar.gz)",
                      dir.string(), prefix));
    }
    return files;
  }
  throw DataError(
      fmt::format("{}: neither cifar-10-batches-bin/ nor cifar-10-partial/ exists — "
                  "point the data root (--data-dir) at a folder holding one, name "
                  "the batch files, or use synthetic-images",
                  root.string()));
}

std::unique_ptr<Dataset> make_cifar(const DatasetSpec& spec, const fs::path& root) {
  const std::vector<fs::path> files =
      spec.files.empty() ? default_cifar_files(root, spec.split) : resolve(spec.files, root);
  ImageSet set = read_cifar10(files);
  const bool augment = spec.augment && spec.split == Split::kTrain;
  return std::make_unique<ImageDataset>(fmt::format("cifar10 {}", split_name(spec.split)),
                                        std::move(set), 10, cifar10_transform(augment));
}

MlmOptions mlm_options(const DatasetSpec& spec) {
  MlmOptions options;
  options.seq_len = spec.seq_len;
  options.masked_per_sequence = spec.masked_per_sequence;
  return options;
}

std::unique_ptr<Dataset> make_text(const DatasetSpec& spec, const std::string& source,
                                   const std::string& text,
                                   std::shared_ptr<const WordpieceVocab> vocab) {
  if (text.find_first_not_of(" \t\r\n\f\v") == std::string::npos) {
    throw DataError(
        fmt::format("{}: empty corpus ({} bytes, no text) — give a plain-text file "
                    "with at least a few thousand words",
                    source, text.size()));
  }
  if (!(spec.eval_fraction > 0.0 && spec.eval_fraction < 1.0)) {
    throw std::invalid_argument(
        fmt::format("text: eval fraction {} must be in (0, 1)", spec.eval_fraction));
  }
  const CorpusSplit parts = split_corpus(text, spec.eval_fraction);
  const std::string_view part = spec.split == Split::kTrain ? parts.train : parts.eval;
  BertTokenizer tokenizer(*vocab);
  std::vector<int32_t> stream = tokenizer.encode(part);
  return std::make_unique<TextMlmDataset>(
      fmt::format("{} {} ({})", spec.kind, split_name(spec.split), source), std::move(vocab),
      std::move(stream), mlm_options(spec));
}

std::unique_ptr<Dataset> make_text_mlm(const DatasetSpec& spec, const fs::path& root) {
  std::vector<fs::path> files = resolve(spec.files, root);
  if (files.empty()) files.push_back(root / "text" / spec.corpus / "input.txt");
  auto vocab = std::make_shared<const WordpieceVocab>(WordpieceVocab::from_file(root / spec.vocab));
  std::string text;
  for (const auto& path : files) {
    const std::vector<uint8_t> bytes = read_data_file(path);
    if (!text.empty() && text.back() != '\n') text += '\n';
    text.append(bytes.begin(), bytes.end());
  }
  const std::string source =
      files.size() == 1 ? files[0].string() : fmt::format("{} files", files.size());
  return make_text(spec, source, text, std::move(vocab));
}

std::unique_ptr<Dataset> make_synthetic_images(const DatasetSpec& spec) {
  SyntheticImageOptions options;
  options.channels = spec.channels;
  options.height = spec.height;
  options.width = spec.width;
  options.seed = spec.seed;
  options.eval = spec.split == Split::kEval;
  options.samples = spec.samples != 0 ? spec.samples : options.eval ? 2000 : 10000;
  ImageSet set = generate_synthetic_images(options);
  return std::make_unique<ImageDataset>(
      fmt::format("synthetic-images {} (seed {})", split_name(spec.split), spec.seed),
      std::move(set), options.classes, synthetic_image_transform(spec.channels));
}

std::unique_ptr<Dataset> make_synthetic_text(const DatasetSpec& spec) {
  SyntheticCorpus corpus =
      generate_synthetic_corpus(spec.seed, spec.samples != 0 ? spec.samples : 120000);
  const std::string source = fmt::format("synthetic corpus, seed {}", spec.seed);
  auto vocab = std::make_shared<const WordpieceVocab>(
      WordpieceVocab::from_tokens(std::move(corpus.vocab), source));
  return make_text(spec, source, corpus.text, std::move(vocab));
}

}  // namespace

Split parse_split(std::string_view name) {
  if (name == "train") return Split::kTrain;
  if (name == "eval" || name == "test") return Split::kEval;
  throw std::invalid_argument(fmt::format("split '{}' is neither train nor eval", name));
}

const char* split_name(Split split) {
  return split == Split::kTrain ? "train" : "eval";
}

std::vector<std::string> dataset_kinds() {
  return {"mnist", "fashion-mnist", "cifar10", "text-mlm", "synthetic-images", "synthetic-text"};
}

std::unique_ptr<Dataset> make_dataset(const DatasetSpec& spec, const fs::path& data_root) {
  if (spec.kind == "mnist" || spec.kind == "fashion-mnist") return make_idx(spec, data_root);
  if (spec.kind == "cifar10") return make_cifar(spec, data_root);
  if (spec.kind == "text-mlm") return make_text_mlm(spec, data_root);
  if (spec.kind == "synthetic-images") return make_synthetic_images(spec);
  if (spec.kind == "synthetic-text") return make_synthetic_text(spec);
  throw std::invalid_argument(fmt::format("unknown dataset kind '{}' — use one of: {}", spec.kind,
                                          fmt::join(dataset_kinds(), ", ")));
}

}  // namespace dctrain
