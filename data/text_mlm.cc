#include "data/text_mlm.h"

#include <fmt/core.h>

#include <numeric>
#include <stdexcept>

#include "common/random.h"
#include "data/io.h"

namespace dctrain {

CorpusSplit split_corpus(std::string_view text, double eval_fraction) {
  size_t cut = static_cast<size_t>(static_cast<double>(text.size()) * (1.0 - eval_fraction));
  cut = std::min(cut, text.size());
  const size_t newline = text.find('\n', cut);
  cut = newline == std::string_view::npos ? text.size() : newline + 1;
  return {text.substr(0, cut), text.substr(cut)};
}

TextMlmDataset::TextMlmDataset(std::string name, std::shared_ptr<const WordpieceVocab> vocab,
                               std::vector<int32_t> stream, MlmOptions options)
    : name_(std::move(name)),
      vocab_(std::move(vocab)),
      stream_(std::move(stream)),
      options_(options),
      stream_tokens_(stream_.size()) {
  const int body = options_.seq_len - 2;
  if (body < 1) {
    throw DataError(
        fmt::format("{}: sequence length {} leaves no room beside [CLS] and [SEP]; "
                    "use at least 3",
                    name_, options_.seq_len));
  }
  if (options_.masked_per_sequence < 0 || options_.masked_per_sequence > body) {
    throw DataError(
        fmt::format("{}: {} masked positions per sequence, must be in [0, {}] for "
                    "sequence length {}",
                    name_, options_.masked_per_sequence, body, options_.seq_len));
  }
  if (!(options_.mask_fraction >= 0.0f && options_.random_fraction >= 0.0f &&
        options_.mask_fraction + options_.random_fraction <= 1.0f)) {
    throw DataError(
        fmt::format("{}: [MASK] fraction {} and random fraction {} must be "
                    "non-negative and sum to at most 1",
                    name_, options_.mask_fraction, options_.random_fraction));
  }
  for (size_t i = 0; i < stream_.size(); ++i) {
    if (stream_[i] < 0 || stream_[i] >= vocab_->size()) {
      throw DataError(fmt::format("{}: token {} at stream position {} is outside the vocab of {}",
                                  name_, stream_[i], i, vocab_->size()));
    }
  }
  sequences_ = stream_.size() / static_cast<size_t>(body);
  if (sequences_ == 0) {
    throw DataError(
        fmt::format("{}: the text gives {} tokens, fewer than the {} of one sequence "
                    "— the corpus (or this split of it) is empty or too short; use a "
                    "longer text or a shorter --seq-len",
                    name_, stream_.size(), body));
  }
  stream_.resize(sequences_ * static_cast<size_t>(body));
  stream_.shrink_to_fit();
}

std::string TextMlmDataset::describe() const {
  return fmt::format(
      "{} ({} sequences of {} tokens from {} WordPiece tokens, vocab {} from {}, "
      "{} masked per sequence)",
      name_, sequences_, options_.seq_len, stream_tokens_, vocab_->size(), vocab_->source(),
      options_.masked_per_sequence);
}

SampleShape TextMlmDataset::shape() const {
  SampleShape s;
  s.kind = BatchKind::kTokens;
  s.seq_len = options_.seq_len;
  s.vocab_size = vocab_->size();
  return s;
}

void TextMlmDataset::fill(std::span<const uint64_t> ids, const SampleContext& context,
                          Batch& out) const {
  const int seq_len = options_.seq_len;
  const int body = seq_len - 2;
  const size_t cells = ids.size() * static_cast<size_t>(seq_len);
  out.kind = BatchKind::kTokens;
  out.size = static_cast<int>(ids.size());
  out.seq_len = seq_len;
  out.channels = out.height = out.width = 0;
  out.images.clear();
  out.tokens.resize(cells);
  out.token_types.assign(cells, 0);
  out.attention.assign(cells, 1);
  out.labels.assign(cells, kIgnoreLabel);
  const SpecialTokens& special = vocab_->special();
  const auto vocab_size = static_cast<uint64_t>(vocab_->size());
  std::vector<int> positions(static_cast<size_t>(body));
  for (size_t n = 0; n < ids.size(); ++n) {
    const uint64_t id = ids[n];
    if (id >= sequences_) {
      throw std::out_of_range(fmt::format("{}: sequence id {} is not below the dataset size {}",
                                          name_, id, sequences_));
    }
    int32_t* tokens = out.tokens.data() + n * static_cast<size_t>(seq_len);  // (T)
    int32_t* labels = out.labels.data() + n * static_cast<size_t>(seq_len);  // (T)
    const int32_t* source = stream_.data() + id * static_cast<uint64_t>(body);
    tokens[0] = special.cls;
    std::copy(source, source + body, tokens + 1);
    tokens[seq_len - 1] = special.sep;

    Rng rng({context.seed, context.train ? context.epoch : kEvalMaskEpoch, id, kMaskStream});
    // Exactly masked_per_sequence distinct positions among 1 .. T-2: the
    // first draws of a Fisher-Yates shuffle.
    std::iota(positions.begin(), positions.end(), 1);
    for (int k = 0; k < options_.masked_per_sequence; ++k) {
      const auto j = static_cast<size_t>(k) + rng.below(static_cast<uint64_t>(body - k));
      std::swap(positions[static_cast<size_t>(k)], positions[j]);
      const int p = positions[static_cast<size_t>(k)];
      labels[p] = tokens[p];
      const float u = rng.uniform_float();
      if (u < options_.mask_fraction) {
        tokens[p] = special.mask;
      } else if (u < options_.mask_fraction + options_.random_fraction) {
        tokens[p] = static_cast<int32_t>(rng.below(vocab_size));
      }  // else unchanged
    }
  }
}

}  // namespace dctrain
