// The benchmarks' inputs: seeded random batches of the two models' shapes,
// the same in every benchmark that trains them.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/batch.h"
#include "common/random.h"

namespace dctrain::bench {

// n CIFAR-10-shaped images (3 x 32 x 32, standard normal) with labels in
// [0, 10).
inline Batch cifar_images(int n) {
  Batch b;
  b.kind = BatchKind::kImage;
  b.size = n;
  b.channels = 3;
  b.height = b.width = 32;
  Rng rng(42);
  b.images.resize(static_cast<size_t>(n) * 3 * 32 * 32);
  for (float& x : b.images) x = static_cast<float>(rng.normal());
  for (int i = 0; i < n; ++i) b.labels.push_back(static_cast<int32_t>(rng.below(10)));
  return b;
}

constexpr int kMlmSeq = 128, kMlmVocab = 30522, kMlmMasked = 19;

// n MLM sequences as the recipe makes them: [CLS] + 126 tokens + [SEP],
// 19 of the 126 masked.
inline Batch mlm_sequences(int n) {
  Batch b;
  b.kind = BatchKind::kTokens;
  b.size = n;
  b.seq_len = kMlmSeq;
  const size_t cells = static_cast<size_t>(n) * kMlmSeq;
  b.tokens.resize(cells);
  b.token_types.assign(cells, 0);
  b.attention.assign(cells, 1);
  b.labels.assign(cells, kIgnoreLabel);
  Rng rng(2024);
  for (int s = 0; s < n; ++s) {
    int32_t* tokens = b.tokens.data() + static_cast<size_t>(s) * kMlmSeq;
    int32_t* labels = b.labels.data() + static_cast<size_t>(s) * kMlmSeq;
    for (int p = 0; p < kMlmSeq; ++p)
      tokens[p] = 1000 + static_cast<int32_t>(rng.below(kMlmVocab - 1000));
    tokens[0] = 101;
    tokens[kMlmSeq - 1] = 102;
    std::vector<int> spots(kMlmSeq - 2);
    for (int p = 0; p < kMlmSeq - 2; ++p) spots[p] = p + 1;
    for (int k = 0; k < kMlmMasked; ++k) {  // partial Fisher-Yates: 19 distinct positions
      const auto j = k + static_cast<int>(rng.below(spots.size() - k));
      std::swap(spots[k], spots[j]);
      labels[spots[k]] = tokens[spots[k]];
      tokens[spots[k]] = 103;
    }
  }
  return b;
}

}  // namespace dctrain::bench
