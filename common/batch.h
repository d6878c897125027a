// A micro-batch as the model consumes it: what a dataset produces from a list
// of global sample ids. One struct for images and token sequences; the fields
// of the other kind stay empty.
#pragma once

#include <cstdint>
#include <vector>

namespace dctrain {

enum class BatchKind { kImage, kTokens };

// Label value for a position that takes no part in the loss (MLM).
inline constexpr int32_t kIgnoreLabel = -100;

struct Batch {
  BatchKind kind = BatchKind::kImage;
  int size = 0;  // N, samples in the batch

  // Images.
  int channels = 0, height = 0, width = 0;
  std::vector<float> images;  // (N, C, H, W), normalised

  // Token sequences.
  int seq_len = 0;                   // T
  std::vector<int32_t> tokens;       // (N, T) input ids, after masking
  std::vector<int32_t> token_types;  // (N, T) segment ids
  std::vector<uint8_t> attention;    // (N, T) 1 = real token, 0 = padding

  // Targets: images (N) class ids; tokens (N, T) original ids at masked
  // positions, kIgnoreLabel elsewhere.
  std::vector<int32_t> labels;
};

}  // namespace dctrain
