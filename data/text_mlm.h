// Masked-language-model sequences from a plain-text corpus: the text split
// 90/10 by characters, each part tokenised into one WordPiece stream and
// packed into fixed-length sequences [CLS] + (T - 2) tokens + [SEP], the
// trailing partial sequence dropped. Sequence id i is the i-th packed window.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/dataset.h"
#include "data/wordpiece.h"

namespace dctrain {

struct MlmOptions {
  int seq_len = 128;             // T, [CLS] and [SEP] included
  int masked_per_sequence = 19;  // exactly this many of the T - 2 ordinary positions (15% of 126)
  float mask_fraction = 0.8f;    // of masked positions: [MASK]
  float random_fraction = 0.1f;  // ... a uniform random id in [0, vocab); the rest unchanged
};

// The two parts of a corpus: the first `1 - eval_fraction` of its characters,
// the cut moved forward to just after the next newline, and the rest.
struct CorpusSplit {
  std::string_view train, eval;
};
CorpusSplit split_corpus(std::string_view text, double eval_fraction = 0.1);

class TextMlmDataset final : public Dataset {
 public:
  // Packs `stream` (token ids from `vocab`, no [CLS]/[SEP]). Throws DataError
  // when the options are invalid or the stream holds no full sequence.
  TextMlmDataset(std::string name, std::shared_ptr<const WordpieceVocab> vocab,
                 std::vector<int32_t> stream, MlmOptions options);

  std::string describe() const override;
  uint64_t size() const override { return sequences_; }
  SampleShape shape() const override;
  // Training (context.train): masks drawn from
  // Rng({context.seed, context.epoch, id, kMaskStream}), fresh every epoch.
  // Evaluation: from Rng({context.seed, kEvalMaskEpoch, id, kMaskStream}),
  // the same every epoch. Token types are all 0, attention all 1.
  void fill(std::span<const uint64_t> ids, const SampleContext& context, Batch& out) const override;

  const WordpieceVocab& vocab() const { return *vocab_; }
  const MlmOptions& options() const { return options_; }
  // Tokens in the stream before packing, and the packed ones (a prefix).
  uint64_t stream_tokens() const { return stream_tokens_; }
  const std::vector<int32_t>& packed_stream() const { return stream_; }

  static constexpr uint64_t kMaskStream = 0x6d61736bULL;             // "mask"
  static constexpr uint64_t kEvalMaskEpoch = 0xe7a1e7a1e7a1e7a1ULL;  // stands for the epoch

 private:
  std::string name_;
  std::shared_ptr<const WordpieceVocab> vocab_;
  std::vector<int32_t> stream_;  // sequences_ * (T - 2) ids
  MlmOptions options_;
  uint64_t stream_tokens_ = 0;
  uint64_t sequences_ = 0;
};

}  // namespace dctrain
