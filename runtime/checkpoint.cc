#include "runtime/checkpoint.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "common/files.h"
#include "common/run_files.h"
#include "model/param_table.h"

namespace dctrain {

namespace {

constexpr char kMagic[8] = {'D', 'C', 'T', 'R', 'C', 'K', 'P', 'T'};
// 2: the ledger as a LedgerState message, the config's kinds as enums. Format
// 1 stored both differently (hand-made ledger bytes, kinds as strings) and
// cannot be read as 2.
constexpr uint32_t kFormatVersion = 2;

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <typename T>
T get(const std::string& in, size_t& at, const std::filesystem::path& path) {
  if (at + sizeof(T) > in.size()) {
    throw std::runtime_error(
        fmt::format("checkpoint '{}' is truncated at byte {}", path.string(), at));
  }
  T value;
  std::memcpy(&value, in.data() + at, sizeof value);
  at += sizeof value;
  return value;
}

struct Parsed {
  v1::CheckpointHeader header;
  size_t tensors_at = 0;
  std::string bytes;
};

Parsed parse(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error(
        fmt::format("no checkpoint at '{}': resume needs a run folder that wrote one "
                    "(checkpoint.every_steps > 0)",
                    path.string()));
  }
  Parsed p;
  std::stringstream buffer;
  buffer << in.rdbuf();
  p.bytes = buffer.str();
  if (p.bytes.size() < sizeof kMagic + 4 + 8 + 8 ||
      std::memcmp(p.bytes.data(), kMagic, sizeof kMagic) != 0) {
    throw std::runtime_error(fmt::format("'{}' is not a dctrain checkpoint", path.string()));
  }
  const uint64_t stored = [&] {
    uint64_t v;
    std::memcpy(&v, p.bytes.data() + p.bytes.size() - 8, 8);
    return v;
  }();
  const uint64_t computed = checksum(std::span<const float>(
      reinterpret_cast<const float*>(p.bytes.data()), (p.bytes.size() - 8) / sizeof(float)));
  if (stored != computed || (p.bytes.size() - 8) % sizeof(float) != 0) {
    throw std::runtime_error(
        fmt::format("checkpoint '{}' is corrupt (checksum mismatch)", path.string()));
  }
  size_t at = sizeof kMagic;
  const auto version = get<uint32_t>(p.bytes, at, path);
  if (version != kFormatVersion) {
    throw std::runtime_error(fmt::format(
        "checkpoint '{}' has format {}, this build reads only format {}: it was written by {} "
        "dctrain; resume it with the build that wrote it, or start the run again without --resume",
        path.string(), version, kFormatVersion, version < kFormatVersion ? "an older" : "a newer"));
  }
  const auto length = get<uint64_t>(p.bytes, at, path);
  // Compared without adding to `at` (a length near 2^64 would wrap around and
  // pass), and at most what Protobuf's int size takes.
  if (length > p.bytes.size() - at ||
      length > static_cast<uint64_t>(std::numeric_limits<int>::max()) ||
      !p.header.ParseFromArray(p.bytes.data() + at, static_cast<int>(length))) {
    throw std::runtime_error(
        fmt::format("checkpoint '{}' has an unreadable header", path.string()));
  }
  if (p.header.tensor_counts_size() != p.header.tensor_names_size()) {
    throw std::runtime_error(
        fmt::format("checkpoint '{}' has a header that names {} tensors and gives {} sizes",
                    path.string(), p.header.tensor_names_size(), p.header.tensor_counts_size()));
  }
  // The tensors start at the next multiple of 4 bytes after the header.
  p.tensors_at = (at + length + 3) / 4 * 4;
  return p;
}

}  // namespace

std::filesystem::path checkpoint_path(const std::filesystem::path& run_dir) {
  return run_dir / run_files::kCheckpoint;
}

void save_checkpoint(const std::filesystem::path& path, v1::CheckpointHeader header,
                     Replica& replica) {
  write_checkpoint(path, std::move(header), replica).put_in_place();
}

PendingFile write_checkpoint(const std::filesystem::path& path, v1::CheckpointHeader header,
                             Replica& replica) {
  header.clear_tensor_names();
  header.clear_tensor_counts();
  const std::vector<TensorSpec> specs = replica.state_specs();
  for (const TensorSpec& s : specs) {
    header.add_tensor_names(std::string(s.name));
    header.add_tensor_counts(s.count);
  }
  const std::string head = header.SerializeAsString();
  std::string out;
  out.append(kMagic, sizeof kMagic);
  put<uint32_t>(out, kFormatVersion);
  put<uint64_t>(out, head.size());
  out += head;
  // Pad so the tensors and the file stay a whole number of floats.
  while (out.size() % sizeof(float) != 0) {
    out.push_back('\0');
  }
  for (std::span<float> view : replica.state_views()) {
    out.append(reinterpret_cast<const char*>(view.data()), view.size_bytes());
  }
  const uint64_t sum = checksum(std::span<const float>(reinterpret_cast<const float*>(out.data()),
                                                       out.size() / sizeof(float)));
  put<uint64_t>(out, sum);
  return PendingFile(path, out);
}

v1::CheckpointHeader load_checkpoint_header(const std::filesystem::path& path) {
  return parse(path).header;
}

void load_checkpoint_state(const std::filesystem::path& path, Replica& replica) {
  Parsed p = parse(path);
  const std::vector<TensorSpec> specs = replica.state_specs();
  if (static_cast<size_t>(p.header.tensor_names_size()) != specs.size()) {
    throw std::runtime_error(fmt::format("checkpoint '{}' holds {} tensors, this model needs {}",
                                         path.string(), p.header.tensor_names_size(),
                                         specs.size()));
  }
  size_t at = p.tensors_at;
  std::vector<std::span<float>> views = replica.state_views();
  for (size_t i = 0; i < specs.size(); ++i) {
    if (p.header.tensor_names(static_cast<int>(i)) != specs[i].name ||
        p.header.tensor_counts(static_cast<int>(i)) != specs[i].count) {
      throw std::runtime_error(
          fmt::format("checkpoint '{}': tensor {} is '{}' ({} floats), this model has '{}' ({}); "
                      "was it written "
                      "for another model or optimizer?",
                      path.string(), i, p.header.tensor_names(static_cast<int>(i)),
                      p.header.tensor_counts(static_cast<int>(i)), specs[i].name, specs[i].count));
    }
    if (at + views[i].size_bytes() > p.bytes.size() - 8) {
      throw std::runtime_error(fmt::format("checkpoint '{}' is truncated", path.string()));
    }
    if (!views[i].empty()) std::memcpy(views[i].data(), p.bytes.data() + at, views[i].size_bytes());
    at += views[i].size_bytes();
  }
  replica.optimizer().set_steps(p.header.optimizer_steps());
}

v1::ModelInput model_input_of(const SampleShape& shape) {
  v1::ModelInput input;
  input.set_tokens(shape.kind == BatchKind::kTokens);
  input.set_channels(static_cast<uint32_t>(shape.channels));
  input.set_height(static_cast<uint32_t>(shape.height));
  input.set_width(static_cast<uint32_t>(shape.width));
  input.set_classes(static_cast<uint32_t>(shape.classes));
  input.set_seq_len(static_cast<uint32_t>(shape.seq_len));
  input.set_vocab_size(static_cast<uint32_t>(shape.vocab_size));
  return input;
}

SampleShape sample_shape_of(const v1::ModelInput& input) {
  SampleShape shape;
  shape.kind = input.tokens() ? BatchKind::kTokens : BatchKind::kImage;
  shape.channels = static_cast<int>(input.channels());
  shape.height = static_cast<int>(input.height());
  shape.width = static_cast<int>(input.width());
  shape.classes = static_cast<int>(input.classes());
  shape.seq_len = static_cast<int>(input.seq_len());
  shape.vocab_size = static_cast<int>(input.vocab_size());
  return shape;
}

}  // namespace dctrain
