// What a worker and the coordinator need from a model: its arenas, one
// micro-batch of training (forward + backward, gradients added into the
// gradient arena), evaluation, and the BatchNorm statistics exchange.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/batch.h"
#include "model/param_table.h"

namespace dctrain {

class ThreadPool;

struct ModelSpec {
  std::string name;        // "resnet20", "bert-tiny", "mnist-cnn", "mlp"
  uint64_t seed = 0;       // initialisation and dropout
  int threads = 1;         // compute threads (over samples; BLAS stays single-threaded)
  int vocab_size = 30522;  // bert-tiny: from the WordPiece vocab
  int max_seq_len = 128;   // bert-tiny
  int num_classes = 10;    // classifiers
  int image_channels = 3;  // classifiers: input shape
  int image_height = 32;
  int image_width = 32;
  float dropout = 0.1f;  // bert-tiny
  int depth = 20;        // resnet20: 6n+2 layers
  int width = 16;        // resnet20: channels of the first stage
  int layers = 2;        // bert-tiny: encoder layers
  int hidden = 128;      // bert-tiny
  int heads = 2;         // bert-tiny
  int intermediate = 512;  // bert-tiny: feed-forward size
};

// What one micro-batch produced. Classification: loss terms = samples.
// MLM: loss terms = scored (masked) tokens.
struct MicroBatchResult {
  double loss_sum = 0.0;   // sum of per-term losses
  int64_t loss_terms = 0;  // terms in loss_sum; the reduce divides by their total
  int64_t samples = 0;     // samples in the micro-batch
  int64_t correct = 0;     // argmax hits among the loss terms
};

class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  virtual std::string name() const = 0;

  const ParamTable& table() const { return table_; }
  Arena& parameters() { return *parameters_; }
  Arena& gradients() { return *gradients_; }

  // Running statistics (BatchNorm running mean and var): not trained, the
  // same on every replica. `statistics()` has the same layout and collects,
  // like the gradients, the per-micro-batch batch statistics of a step,
  // each weighted by the micro-batch's samples. Empty tables for models
  // without BatchNorm.
  const ParamTable& buffer_table() const { return buffer_table_; }
  Arena& buffers() { return *buffers_; }
  Arena& statistics() { return *statistics_; }

  // Training-mode forward and backward on one micro-batch. ADDS the gradient
  // of loss_sum into gradients() and the sample-weighted batch statistics
  // into statistics(). Allocates nothing once the workspace for this batch
  // shape exists.
  virtual MicroBatchResult train_micro_batch(const Batch& batch) = 0;

  // Eval-mode forward (running statistics, no dropout); changes no state.
  virtual MicroBatchResult evaluate(const Batch& batch) = 0;

  // Folds a step's averaged batch statistics (statistics() summed over all
  // contributions, divided by their samples) into buffers() with the layers'
  // momentum: running = (1 - m) * running + m * averaged.
  virtual void apply_statistics(std::span<const float> averaged) = 0;

  // Floating-point operations of one sample's forward pass, counted from
  // the layer shapes: 2 per multiply-add of every convolution and matrix
  // product (attention's scores and weighted sums included). Elementwise
  // work (normalisation, activations, softmax, pooling, the loss) is left
  // out, as model-FLOPs counts do; training counts 3 x this (the
  // backward's two products per layer). `masked_per_sequence`: the rows of
  // a masked-language model's head per sequence; classifiers ignore it.
  // 0: not counted for this model.
  virtual double forward_flops_per_sample(int /*masked_per_sequence*/) const { return 0.0; }

  // The model's compute threads, lent to whatever else runs between its
  // steps on the same cores (the optimizer's update); nullptr: none.
  virtual ThreadPool* thread_pool() { return nullptr; }

 protected:
  Model() = default;
  // Call once the tables are complete.
  void allocate_arenas();

  ParamTable table_;
  ParamTable buffer_table_;
  std::unique_ptr<Arena> parameters_, gradients_, buffers_, statistics_;
};

// Builds a model by spec.name, initialised from spec.seed. Throws
// std::invalid_argument naming the known models for an unknown name.
std::unique_ptr<Model> make_model(const ModelSpec& spec);

}  // namespace dctrain
