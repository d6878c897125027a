// Helpers for the data tests: a temporary folder that cleans up after itself,
// writing files (plain or gzip'd) in the real formats, hashing batches.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/batch.h"

namespace dctrain::test {

class TempDir {
 public:
  TempDir() {
    std::random_device device;
    path_ = std::filesystem::temp_directory_path() /
            ("dctrain-data-test-" + std::to_string(device()) + std::to_string(device()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

inline std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& bytes) {
  z_stream stream{};
  if (deflateInit2(&stream, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  std::vector<uint8_t> out(deflateBound(&stream, static_cast<uLong>(bytes.size())) + 64);
  stream.next_in = const_cast<Bytef*>(bytes.data());
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  if (deflate(&stream, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate failed");
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

inline void put_u32_be(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// IDX images (N, rows, cols) with pixel (n, y, x) = (n * 31 + y * 7 + x) % 256.
inline std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> out;
  put_u32_be(out, 0x803);
  put_u32_be(out, n);
  put_u32_be(out, rows);
  put_u32_be(out, cols);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t y = 0; y < rows; ++y)
      for (uint32_t x = 0; x < cols; ++x)
        out.push_back(static_cast<uint8_t>((i * 31 + y * 7 + x) % 256));
  return out;
}

inline std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out;
  put_u32_be(out, 0x801);
  put_u32_be(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

// CIFAR-10 records: label (first + r) % 10, pixel (c, y, x) = (r * 13 + c * 50 + y * 3 + x) % 256.
inline std::vector<uint8_t> cifar_records(int records, int first = 0) {
  std::vector<uint8_t> out;
  for (int r = 0; r < records; ++r) {
    out.push_back(static_cast<uint8_t>((first + r) % 10));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x)
          out.push_back(static_cast<uint8_t>(((first + r) * 13 + c * 50 + y * 3 + x) % 256));
  }
  return out;
}

// FNV-1a over the bytes of a range.
template <typename T>
uint64_t hash_bytes(const T* data, size_t count, uint64_t h = 0xcbf29ce484222325ULL) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  for (size_t i = 0; i < count * sizeof(T); ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

// The hash of sample n of a batch: its image or its tokens and labels.
inline uint64_t sample_hash(const Batch& b, int n) {
  const auto i = static_cast<size_t>(n);
  if (b.kind == BatchKind::kImage) {
    const size_t per = static_cast<size_t>(b.channels) * b.height * b.width;
    return hash_bytes(b.images.data() + i * per, per, hash_bytes(b.labels.data() + i, 1));
  }
  const auto t = static_cast<size_t>(b.seq_len);
  uint64_t h = hash_bytes(b.tokens.data() + i * t, t);
  h = hash_bytes(b.labels.data() + i * t, t, h);
  h = hash_bytes(b.token_types.data() + i * t, t, h);
  return hash_bytes(b.attention.data() + i * t, t, h);
}

}  // namespace dctrain::test
