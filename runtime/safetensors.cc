#include "runtime/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include "common/files.h"

namespace dctrain {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this build copies floats as they are");

namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

size_t element_bytes(SafeDtype dtype) {
  return dtype == SafeDtype::kF32 ? 4 : 8;
}
// The format's own bound on the header (the reference reader refuses more).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Integers a JSON number holds exactly as a double.
constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

uint64_t element_count(const SafeTensor& t) {
  uint64_t n = 1;
  for (const int64_t d : t.shape) {
    if (d < 0) {
      throw std::invalid_argument(
          fmt::format("tensor '{}' has a negative dimension ({})", t.name, d));
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

// A JSON number that must be a whole number in [0, 2^53].
uint64_t whole_number(const Value& v, const std::string& what, const std::string& origin) {
  const double d = v.number_value();
  if (v.kind_case() != Value::kNumberValue || !(d >= 0.0) || d > kMaxExactInteger ||
      std::floor(d) != d) {
    throw std::runtime_error(
        fmt::format("{}: {} is not a whole number of at least 0", origin, what));
  }
  return static_cast<uint64_t>(d);
}

struct Entry {
  std::string name;
  std::vector<int64_t> shape;
  SafeDtype dtype = SafeDtype::kF32;
  uint64_t begin = 0, end = 0;
};

Entry read_entry(const std::string& name, const Value& value, const std::string& origin) {
  const std::string where = fmt::format("{}: tensor '{}'", origin, name);
  if (value.kind_case() != Value::kStructValue) {
    throw std::runtime_error(fmt::format("{} is not a JSON object", where));
  }
  const auto& fields = value.struct_value().fields();
  const auto field = [&](const char* key) -> const Value& {
    const auto it = fields.find(key);
    if (it == fields.end()) throw std::runtime_error(fmt::format("{} has no \"{}\"", where, key));
    return it->second;
  };
  const Value& dtype = field("dtype");
  if (dtype.kind_case() != Value::kStringValue) {
    throw std::runtime_error(fmt::format("{}: \"dtype\" is not a string", where));
  }
  Entry e;
  e.name = name;
  if (dtype.string_value() == "I64") {
    e.dtype = SafeDtype::kI64;
  } else if (dtype.string_value() != "F32") {
    throw std::runtime_error(fmt::format(
        "{} is of dtype {}; dctrain reads float32 (F32) and int64 (I64) tensors only (convert "
        "the file first, e.g. with PyTorch: tensor.float())",
        where, dtype.string_value()));
  }
  const size_t bytes = element_bytes(e.dtype);
  const Value& shape = field("shape");
  if (shape.kind_case() != Value::kListValue) {
    throw std::runtime_error(fmt::format("{}: \"shape\" is not a list", where));
  }
  uint64_t count = 1;
  for (const Value& d : shape.list_value().values()) {
    const uint64_t n = whole_number(d, fmt::format("tensor '{}''s shape", name), origin);
    if (n != 0 && count > std::numeric_limits<uint64_t>::max() / n) {
      throw std::runtime_error(fmt::format("{}: its shape holds more values than fit", where));
    }
    count *= n;
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const Value& offsets = field("data_offsets");
  if (offsets.kind_case() != Value::kListValue || offsets.list_value().values_size() != 2) {
    throw std::runtime_error(fmt::format("{}: \"data_offsets\" is not [begin, end]", where));
  }
  e.begin = whole_number(offsets.list_value().values(0), where + "'s begin offset", origin);
  e.end = whole_number(offsets.list_value().values(1), where + "'s end offset", origin);
  if (e.end < e.begin || (e.end - e.begin) / bytes != count || (e.end - e.begin) % bytes != 0) {
    throw std::runtime_error(fmt::format(
        "{}: its data_offsets [{}, {}] hold {} bytes, but its shape [{}] needs {} {} values ({} "
        "bytes)",
        where, e.begin, e.end, e.end >= e.begin ? e.end - e.begin : 0, fmt::join(e.shape, ", "),
        count, dtype_word(e.dtype), count * bytes));
  }
  return e;
}

}  // namespace

const char* dtype_word(SafeDtype dtype) {
  return dtype == SafeDtype::kF32 ? "F32" : "I64";
}

const SafeTensor* SafeTensors::find(std::string_view name) const {
  for (const SafeTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string encode_safetensors(const SafeTensors& file) {
  std::string header = "{";
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : file.metadata) {
      header += fmt::format("{}{}:{}", first ? "" : ",", json_string(key), json_string(value));
      first = false;
    }
    header += "}";
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const SafeTensor& t : file.tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      throw std::invalid_argument(fmt::format(
          "tensor name '{}' is {}", t.name, t.name == "__metadata__" ? "reserved" : "used twice"));
    }
    const uint64_t count = element_count(t);
    const size_t held = t.dtype == SafeDtype::kF32 ? t.values.size() : t.integers.size();
    if (count != held) {
      throw std::invalid_argument(
          fmt::format("tensor '{}' has {} values for a shape of {}", t.name, held, count));
    }
    const uint64_t end = offset + count * element_bytes(t.dtype);
    header += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          header.size() > 1 ? "," : "", json_string(t.name), dtype_word(t.dtype),
                          fmt::join(t.shape, ","), offset, end);
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(out.data(), &length, 8);
  out += header;
  out.reserve(out.size() + offset);
  for (const SafeTensor& t : file.tensors) {
    if (t.dtype == SafeDtype::kF32) {
      out.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
    } else {
      out.append(reinterpret_cast<const char*>(t.integers.data()),
                 t.integers.size() * sizeof(int64_t));
    }
  }
  return out;
}

SafeTensors decode_safetensors(std::string_view bytes, const std::string& origin) {
  if (bytes.size() < 8) {
    throw std::runtime_error(
        fmt::format("{}: {} bytes, shorter than a safetensors header's length (8 bytes)", origin,
                    bytes.size()));
  }
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  if (length > kMaxHeaderBytes || length > bytes.size() - 8) {
    throw std::runtime_error(fmt::format(
        "{}: its header says it is {} bytes long, but the file has {} bytes after the length "
        "(not a safetensors file, or truncated)",
        origin, length, bytes.size() - 8));
  }
  const std::string_view json = bytes.substr(8, length);
  const std::string_view data = bytes.substr(8 + length);
  Struct header;
  const auto status = google::protobuf::util::JsonStringToMessage(std::string(json), &header);
  if (!status.ok()) {
    throw std::runtime_error(fmt::format("{}: its header is not a JSON object: {}", origin,
                                         std::string(status.message())));
  }
  SafeTensors out;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.fields()) {
    if (name == "__metadata__") {
      if (value.kind_case() != Value::kStructValue) {
        throw std::runtime_error(fmt::format("{}: \"__metadata__\" is not a JSON object", origin));
      }
      for (const auto& [key, v] : value.struct_value().fields()) {
        if (v.kind_case() != Value::kStringValue) {
          throw std::runtime_error(fmt::format("{}: metadata \"{}\" is not a string", origin, key));
        }
        out.metadata[key] = v.string_value();
      }
      continue;
    }
    entries.push_back(read_entry(name, value, origin));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const Entry& e : entries) {
    if (e.begin != covered) {
      throw std::runtime_error(fmt::format(
          "{}: tensor '{}' starts at byte {} of the data, but the tensors before it end at {} "
          "({})",
          origin, e.name, e.begin, covered, e.begin < covered ? "they overlap" : "a gap"));
    }
    covered = e.end;
  }
  if (covered != data.size()) {
    throw std::runtime_error(
        fmt::format("{}: the tensors hold {} bytes of data, but the file has {} after its header{}",
                    origin, covered, data.size(), covered > data.size() ? " (truncated)" : ""));
  }
  for (Entry& e : entries) {
    SafeTensor t;
    t.name = std::move(e.name);
    t.shape = std::move(e.shape);
    t.dtype = e.dtype;
    void* target = nullptr;
    if (e.dtype == SafeDtype::kF32) {
      t.values.resize((e.end - e.begin) / sizeof(float));
      target = t.values.data();
    } else {
      t.integers.resize((e.end - e.begin) / sizeof(int64_t));
      target = t.integers.data();
    }
    if (e.end > e.begin) std::memcpy(target, data.data() + e.begin, e.end - e.begin);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

void write_safetensors(const std::filesystem::path& path, const SafeTensors& file) {
  write_file_atomically(path, encode_safetensors(file));
}

SafeTensors read_safetensors(const std::filesystem::path& path) {
  return decode_safetensors(read_text_file(path), path.string());
}

}  // namespace dctrain
