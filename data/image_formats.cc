#include "data/image_formats.h"

#include <fmt/core.h>

#include <cstring>

#include "data/io.h"

namespace dctrain {
namespace {

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Checks an IDX header and returns its dimensions.
std::vector<uint32_t> idx_dimensions(const std::vector<uint8_t>& bytes,
                                     const std::filesystem::path& path, uint32_t expected_magic,
                                     const char* what) {
  const std::string name = path.string();
  if (bytes.size() < 4) {
    throw DataError(
        fmt::format("{}: {} bytes, too short for an IDX header — the file is "
                    "truncated or empty",
                    name, bytes.size()));
  }
  const uint32_t magic = big_endian_u32(bytes.data());
  if (magic != expected_magic) {
    throw DataError(fmt::format(
        "{}: IDX magic is 0x{:08x}, expected 0x{:08x} ({}) — is this the {} file of the pair, and "
        "an IDX file at all?",
        name, magic, expected_magic,
        expected_magic == 0x803 ? "uint8 images, 3 dimensions" : "uint8 labels, 1 dimension",
        what));
  }
  const size_t dims = bytes[3];
  if (bytes.size() < 4 + 4 * dims) {
    throw DataError(
        fmt::format("{}: header truncated ({} bytes) — fetch the file again", name, bytes.size()));
  }
  std::vector<uint32_t> shape(dims);
  size_t expected = 1;
  for (size_t d = 0; d < dims; ++d) {
    shape[d] = big_endian_u32(bytes.data() + 4 + 4 * d);
    expected *= shape[d];
  }
  const size_t payload = bytes.size() - 4 - 4 * dims;
  if (payload < expected) {
    throw DataError(
        fmt::format("{}: truncated: the header promises {} bytes of data, the file "
                    "holds {} — fetch the file again",
                    name, expected, payload));
  }
  if (payload > expected) {
    throw DataError(
        fmt::format("{}: {} bytes after the {} promised by the header — the file is "
                    "corrupt or not an IDX file",
                    name, payload - expected, expected));
  }
  return shape;
}

}  // namespace

ImageSet read_cifar10(const std::vector<std::filesystem::path>& files) {
  if (files.empty()) throw DataError("cifar10: no batch files given");
  ImageSet set;
  set.channels = 3;
  set.height = 32;
  set.width = 32;
  for (const auto& path : files) {
    const std::vector<uint8_t> bytes = read_data_file(path);
    if (bytes.empty()) {
      throw DataError(fmt::format("{}: empty file, expected CIFAR-10 records of {} bytes",
                                  path.string(), kCifarRecordBytes));
    }
    if (bytes.size() % kCifarRecordBytes != 0) {
      throw DataError(fmt::format(
          "{}: {} bytes, not a multiple of the {}-byte CIFAR-10 record (last record has {} bytes) "
          "— is the file truncated, or not a CIFAR-10 binary batch (the python pickles are not)?",
          path.string(), bytes.size(), kCifarRecordBytes, bytes.size() % kCifarRecordBytes));
    }
    const size_t records = bytes.size() / kCifarRecordBytes;
    const size_t first = set.labels.size();
    set.labels.resize(first + records);
    set.pixels.resize((first + records) * set.image_bytes());
    for (size_t r = 0; r < records; ++r) {
      const uint8_t* record = bytes.data() + r * kCifarRecordBytes;
      if (record[0] > 9) {
        throw DataError(
            fmt::format("{}: record {} has label {}, CIFAR-10 labels are 0-9 — the "
                        "file is corrupt, or a CIFAR-100 file (2 label bytes)",
                        path.string(), r, record[0]));
      }
      set.labels[first + r] = record[0];
      std::memcpy(set.pixels.data() + (first + r) * set.image_bytes(), record + 1,
                  set.image_bytes());
    }
  }
  return set;
}

ImageSet read_idx(const std::filesystem::path& images, const std::filesystem::path& labels,
                  int classes) {
  const std::vector<uint8_t> image_bytes = read_data_file(images);
  const std::vector<uint32_t> shape = idx_dimensions(image_bytes, images, 0x803, "images");
  const std::vector<uint8_t> label_bytes = read_data_file(labels);
  const std::vector<uint32_t> count = idx_dimensions(label_bytes, labels, 0x801, "labels");
  if (shape[0] != count[0]) {
    throw DataError(
        fmt::format("{} holds {} images but {} holds {} labels — the two files are "
                    "not a pair (train with train, t10k with t10k)",
                    images.string(), shape[0], labels.string(), count[0]));
  }
  if (shape[0] == 0) throw DataError(fmt::format("{}: holds no images", images.string()));
  ImageSet set;
  set.channels = 1;
  set.height = static_cast<int>(shape[1]);
  set.width = static_cast<int>(shape[2]);
  set.pixels.assign(image_bytes.begin() + 16, image_bytes.end());
  set.labels.assign(label_bytes.begin() + 8, label_bytes.end());
  for (size_t i = 0; i < set.labels.size(); ++i) {
    if (set.labels[i] >= classes) {
      throw DataError(
          fmt::format("{}: label {} of sample {} is not below {} classes — the file is "
                      "corrupt or of another dataset",
                      labels.string(), set.labels[i], i, classes));
    }
  }
  return set;
}

}  // namespace dctrain
