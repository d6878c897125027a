// The safetensors file format, the one Hugging Face and PyTorch users load
// weights from: 8 bytes holding the header's length N (little-endian
// unsigned 64-bit), N bytes of JSON, then the tensors' raw little-endian
// bytes, packed in the order of their offsets with no gap. The JSON maps
// each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]}
// (byte offsets into the data) and may hold "__metadata__", a map of
// strings to strings.
//
// dctrain's tensors are float32 ("F32"); int64 ("I64") tensors are read and
// written too, for the counters PyTorch keeps beside weights (BatchNorm's
// num_batches_tracked). A file holding another dtype is refused on reading,
// naming the tensor. Reading checks everything the
// format promises (lengths, offsets inside the data and matching the
// shape, no overlap, no gap) before anything is used, and says what is
// wrong with the file's name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dctrain {

enum class SafeDtype { kF32, kI64 };

struct SafeTensor {
  SafeTensor() = default;
  // A float32 tensor.
  SafeTensor(std::string name_, std::vector<int64_t> shape_, std::vector<float> values_)
      : name(std::move(name_)), shape(std::move(shape_)), values(std::move(values_)) {}
  // An int64 tensor.
  static SafeTensor int64(std::string name, std::vector<int64_t> shape,
                          std::vector<int64_t> integers) {
    SafeTensor t(std::move(name), std::move(shape), {});
    t.dtype = SafeDtype::kI64;
    t.integers = std::move(integers);
    return t;
  }

  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // kF32: row-major, as many as the shape's product
  SafeDtype dtype = SafeDtype::kF32;
  std::vector<int64_t> integers;  // kI64: likewise
};

// "F32" or "I64", as the header names it.
const char* dtype_word(SafeDtype dtype);

struct SafeTensors {
  std::map<std::string, std::string> metadata;
  std::vector<SafeTensor> tensors;  // in the order of their data

  // The tensor named `name`, or nullptr.
  const SafeTensor* find(std::string_view name) const;
};

// The file's bytes: the tensors' data in their order, the header padded
// with spaces to a multiple of 8 bytes (so the data is aligned). Throws
// std::invalid_argument for two tensors of one name, a negative dimension,
// or values that do not fill the shape.
std::string encode_safetensors(const SafeTensors& file);

// The tensors and metadata of a file's bytes; `origin` names the file in
// the messages of the std::runtime_error it throws when they are not a
// safetensors file of float32 and int64 tensors.
SafeTensors decode_safetensors(std::string_view bytes, const std::string& origin);

// encode_safetensors() written atomically (common/files.h); read and
// decoded.
void write_safetensors(const std::filesystem::path& path, const SafeTensors& file);
SafeTensors read_safetensors(const std::filesystem::path& path);

}  // namespace dctrain
