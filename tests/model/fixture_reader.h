// Reader for the numerical fixture files written by
// tests/fixtures/fixture_format.py (format described there): named tensors
// produced by an independent reference implementation.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace dctrain::testing {

struct FixtureTensor {
  std::vector<int64_t> shape;
  std::vector<double> values;  // every dtype widened to double (exactly)
};

class Fixture {
 public:
  explicit Fixture(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("fixture: cannot open " + path);
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (bytes_.size() < 16 || std::memcmp(bytes_.data(), "DCTRFIX\0", 8) != 0) {
      throw std::runtime_error("fixture: " + path + " lacks the DCTRFIX magic; regenerate it");
    }
    pos_ = 8;
    const auto version = read<uint32_t>();
    if (version != 1) {
      throw std::runtime_error("fixture: " + path + " has version " + std::to_string(version) +
                               ", this reader knows 1");
    }
    const auto count = read<uint32_t>();
    for (uint32_t r = 0; r < count; ++r) {
      const auto name_length = read<uint32_t>();
      need(name_length);
      std::string name(bytes_.data() + pos_, name_length);
      pos_ += name_length;
      const auto dtype = read<uint8_t>();
      const auto ndim = read<uint32_t>();
      FixtureTensor t;
      size_t elements = 1;
      for (uint32_t d = 0; d < ndim; ++d) {
        t.shape.push_back(read<int64_t>());
        elements *= static_cast<size_t>(t.shape.back());
      }
      t.values.resize(elements);
      if (dtype == 3) {
        const double scale = std::ldexp(1.0, read<int32_t>());
        for (double& v : t.values) v = static_cast<double>(read<int16_t>()) * scale;
      } else {
        for (double& v : t.values) {
          switch (dtype) {
            case 0:
              v = read<float>();
              break;
            case 1:
              v = read<double>();
              break;
            case 2:
              v = read<int32_t>();
              break;
            default:
              throw std::runtime_error("fixture: " + name + " has unknown dtype");
          }
        }
      }
      tensors_.emplace(std::move(name), std::move(t));
    }
  }

  const FixtureTensor& operator[](const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error("fixture: no tensor named '" + name + "'");
    return it->second;
  }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  double scalar(const std::string& name) const { return (*this)[name].values.at(0); }

 private:
  void need(size_t n) const {
    if (pos_ + n > bytes_.size()) throw std::runtime_error("fixture: file is truncated");
  }
  template <typename V>
  V read() {
    need(sizeof(V));
    V v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(V));  // little-endian hosts only (x86-64)
    pos_ += sizeof(V);
    return v;
  }

  std::vector<char> bytes_;
  size_t pos_ = 0;
  std::map<std::string, FixtureTensor> tensors_;
};

}  // namespace dctrain::testing
