// The image file formats: CIFAR-10 binary batches and IDX (MNIST,
// Fashion-MNIST), parsed once into compact uint8 memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace dctrain {

// Labelled images as stored: raw pixels, no normalisation.
struct ImageSet {
  int channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;  // (N, C, H, W), 0-255
  std::vector<uint8_t> labels;  // (N), class ids
  uint64_t size() const { return labels.size(); }
  size_t image_bytes() const { return static_cast<size_t>(channels) * height * width; }
};

// CIFAR-10 binary batches: records of 3,073 bytes, one label byte (0-9) then
// 1,024 R, 1,024 G, 1,024 B bytes, each plane 32x32 row-major. Any number of
// files, any number of records each, concatenated in the order given.
inline constexpr int kCifarRecordBytes = 3073;
ImageSet read_cifar10(const std::vector<std::filesystem::path>& files);

// An IDX pair (gzip'd or not): images magic 0x00000803 (N, rows, cols) and
// labels magic 0x00000801 (N), uint8 values, big-endian header. Labels must
// be below `classes`.
ImageSet read_idx(const std::filesystem::path& images, const std::filesystem::path& labels,
                  int classes = 10);

}  // namespace dctrain
