// The dataset interface: any sample, by global id, identically on every worker.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/batch.h"

namespace dctrain {

// What a random choice about a sample may depend on. Augmentation and masking
// draw from hash_key({seed, epoch, id, ...}) so that a sample processed by
// another worker, or requeued to a later step, is bit-identical.
struct SampleContext {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  bool train = true;  // false: the held-out split, no augmentation, fixed masks
};

// What a model needs to know about the samples it will be fed.
struct SampleShape {
  BatchKind kind = BatchKind::kImage;
  int channels = 0, height = 0, width = 0;  // images
  int classes = 0;                          // images: labels are in [0, classes)
  int seq_len = 0;                          // tokens: T
  int vocab_size = 0;                       // tokens: ids are in [0, vocab_size)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Short description for logs, e.g. "cifar10 (4000 train records)".
  virtual std::string describe() const = 0;
  // Number of samples addressable by id, [0, size()).
  virtual uint64_t size() const = 0;
  // Image shape and class count, or sequence length and vocabulary size.
  virtual SampleShape shape() const = 0;
  // Writes the samples `ids`, in order, into `out` (resizing its buffers).
  // Throws std::out_of_range for an id not below size(). Each sample's data
  // depends only on (context, id), never on the other ids of the batch.
  virtual void fill(std::span<const uint64_t> ids, const SampleContext& context,
                    Batch& out) const = 0;

  Batch make_batch(std::span<const uint64_t> ids, const SampleContext& context) const;
};

}  // namespace dctrain
