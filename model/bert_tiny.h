// bert-tiny for masked-language-model training: 2 post-LayerNorm encoder
// layers (hidden 128, 2 heads, FFN 512, GELU), learned positions, two token
// types, and BERT's MLM head (dense + GELU + LayerNorm, decoder tied to the
// word embeddings, plus a vocabulary-sized bias).
//
// The head runs only on the masked positions, gathered first: with 19 masked
// tokens in 128 that is 15% of the decoder GEMM and of the fused softmax +
// cross-entropy over the vocabulary, which dominate the step otherwise.
//
// Work is split into fixed pieces that do not depend on the thread count:
// the encoder in chunks of kSequencesPerChunk sequences (each chunk with its
// own gradient buffer, summed in chunk order), the head in blocks of masked
// rows and slices of the vocabulary. So gradients are bit-identical whatever
// ModelSpec::threads is.
//
// Dropout masks are a pure function of (seed, sequence, site, position), the
// sequence identified by a hash of its contents (masked tokens, segments,
// padding, labels): a sequence draws the same masks on any worker, in any
// micro-batch, in any rerun; fresh masking each epoch gives fresh dropout.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "model/model.h"

namespace dctrain {

class ThreadPool;

struct BertTinyConfig {
  int vocab_size = 30522;
  int max_positions = 128;
  int type_vocab_size = 2;
  int hidden = 128;
  int layers = 2;
  int heads = 2;
  int ffn = 512;
  double dropout = 0.1;  // hidden and attention-probability dropout
};

class BertTiny final : public Model {
 public:
  static constexpr int kSequencesPerChunk = 8;

  // Builds the parameter table, allocates the arenas and initialises as BERT:
  // weights normal(0, 0.02) from spec.seed, biases 0, LayerNorm weight 1 and
  // bias 0. Throws std::invalid_argument for a bad spec.
  explicit BertTiny(const ModelSpec& spec);
  ~BertTiny() override;

  // "bert-tiny" at its sizes, else "bert-L<layers>-H<hidden>-A<heads>" (the
  // naming of Google's small BERTs; a feed-forward size off 4 x hidden adds
  // "-I<intermediate>").
  std::string name() const override;
  const BertTinyConfig& config() const { return config_; }

  // Loss = sum of cross-entropies over the masked tokens (labels not
  // kIgnoreLabel); loss_terms = masked tokens. Throws std::invalid_argument
  // for a batch that is not tokens, too long, or has out-of-range ids.
  MicroBatchResult train_micro_batch(const Batch& batch) override;
  MicroBatchResult evaluate(const Batch& batch) override;
  // No BatchNorm: nothing to fold.
  void apply_statistics(std::span<const float> averaged) override;
  ThreadPool* thread_pool() override { return pool_.get(); }
  // A sequence of max_positions tokens: per layer Q, K, V and the output
  // projection (4 x T x H x H multiply-adds), the scores and the weighted
  // sum (2 x T x T x H), the feed-forward (2 x T x H x ffn); then the head
  // on the masked rows only (H x H + H x vocab each).
  double forward_flops_per_sample(int masked_per_sequence) const override;

  // (masked tokens, vocab): the logits of the last evaluate(), masked
  // positions in row-major (sequence, position) order.
  std::span<const float> masked_logits() const;

  // Parameters of bert-tiny for a vocabulary and position table size.
  static int64_t parameter_count(int vocab_size, int max_positions);
  static int64_t parameter_count(const BertTinyConfig& config);

 private:
  struct Indices;
  struct Workspace;

  MicroBatchResult run(const Batch& batch, bool train);
  void validate(const Batch& batch) const;
  void prepare(const Batch& batch, bool train);
  void forward_chunk(int chunk, int thread);
  void backward_chunk(int chunk, int thread);
  MicroBatchResult head(bool train);
  void initialise(uint64_t seed);

  BertTinyConfig config_;
  const Batch* current_ = nullptr;  // the batch of the running step
  uint64_t seed_;
  std::unique_ptr<Indices> index_;
  std::unique_ptr<Workspace> ws_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace dctrain
