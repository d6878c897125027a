// Building a dataset from a run config: a kind, a split and file names
// relative to a data root laid out like
//   <root>/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
//   <root>/fashion-mnist/  (the same file names)
//   <root>/cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin  or
//   <root>/cifar-10-partial/{data_batch_*,test_batch*}.bin
//   <root>/text/<corpus>/input.txt
//   <root>/bert-base-uncased/vocab.txt
// so one config serves every host whatever its root is.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"

namespace dctrain {

enum class Split { kTrain, kEval };

// "train" or "eval" (also "test"); throws std::invalid_argument otherwise.
Split parse_split(std::string_view name);
const char* split_name(Split split);

struct DatasetSpec {
  // "mnist", "fashion-mnist", "cifar10", "text-mlm", "synthetic-images",
  // "synthetic-text".
  std::string kind = "synthetic-images";
  Split split = Split::kTrain;
  // Files relative to the data root (absolute paths are taken as they are).
  // Empty: the kind's standard files for the split. mnist / fashion-mnist:
  // {images, labels}; cifar10: the batches, in order; text-mlm: the corpus
  // (several are joined with newlines).
  std::vector<std::string> files;
  // text-mlm with no files: text/<corpus>/input.txt.
  std::string corpus = "tinyshakespeare";
  // text-mlm: the WordPiece vocab relative to the data root.
  std::string vocab = "bert-base-uncased/vocab.txt";
  // cifar10 train split: random crop (4-pixel padding) + horizontal flip.
  bool augment = true;

  // Synthetic kinds: generation seed, and size (0 = the default: images
  // 10,000 train / 2,000 eval; text 120,000 words, split like a corpus).
  uint64_t seed = 0;
  uint64_t samples = 0;
  // synthetic-images: image shape, e.g. 3x32x32 (resnet20) or 1x28x28 (mnist models).
  int channels = 3, height = 32, width = 32;

  // Text kinds: the MLM recipe.
  int seq_len = 128;             // [CLS] + seq_len - 2 tokens + [SEP]
  int masked_per_sequence = 19;  // exactly, among the seq_len - 2 ordinary positions
  double eval_fraction = 0.1;    // the tail of the text (cut at a newline) is the eval split
};

// The kinds make_dataset knows, for --help texts and error messages.
std::vector<std::string> dataset_kinds();

// Loads (or generates) the dataset; files are parsed once, here. Throws
// DataError naming the file, what is wrong and how to fix it, and
// std::invalid_argument for an unknown kind or invalid option.
std::unique_ptr<Dataset> make_dataset(const DatasetSpec& spec,
                                      const std::filesystem::path& data_root);

}  // namespace dctrain
