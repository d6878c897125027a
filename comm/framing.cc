#include "comm/framing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace dctrain {

size_t frames_for(uint64_t count) {
  return static_cast<size_t>((count + kMaxFrameFloats - 1) / kMaxFrameFloats);
}

void add_tensor(Message& message, std::string name, std::span<const float> values) {
  v1::TensorHeader* header = message.envelope.add_tensors();
  header->set_name(std::move(name));
  header->set_count(values.size());
  for (size_t begin = 0; begin < values.size(); begin += kMaxFrameFloats) {
    const size_t n = std::min(kMaxFrameFloats, values.size() - begin);
    message.frames.emplace_back(values.data() + begin, n * sizeof(float));
  }
}

void add_tensor_view(Message& message, std::string name, std::span<const float> values,
                     const std::shared_ptr<const void>& owner) {
  v1::TensorHeader* header = message.envelope.add_tensors();
  header->set_name(std::move(name));
  header->set_count(values.size());
  for (size_t begin = 0; begin < values.size(); begin += kMaxFrameFloats) {
    const size_t n = std::min(kMaxFrameFloats, values.size() - begin);
    // ZeroMQ calls the free function, from whichever thread drops the frame
    // last, once it no longer reads the memory.
    auto* reference = new std::shared_ptr<const void>(owner);
    message.frames.emplace_back(
        const_cast<float*>(values.data() + begin), n * sizeof(float),
        [](void*, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); },
        reference);
  }
}

Message share(Message& message) {
  Message copy;
  copy.envelope = message.envelope;
  copy.frames.reserve(message.frames.size());
  for (zmq::message_t& frame : message.frames) {
    copy.frames.emplace_back();
    copy.frames.back().copy(frame);
  }
  return copy;
}

std::vector<zmq::message_t> encode(Message&& message) {
  std::vector<zmq::message_t> parts;
  parts.reserve(1 + message.frames.size());
  parts.emplace_back(message.envelope.SerializeAsString());
  for (zmq::message_t& frame : message.frames) parts.push_back(std::move(frame));
  message.frames.clear();
  return parts;
}

std::optional<std::string> decode(std::vector<zmq::message_t>&& parts, Message& out) {
  if (parts.empty()) return "empty message (no header frame)";
  const zmq::message_t& header = parts.front();
  if (header.size() > (size_t{1} << 26)) {
    return fmt::format("header frame of {} bytes is too large to be an envelope", header.size());
  }
  if (!out.envelope.ParseFromArray(header.data(), static_cast<int>(header.size()))) {
    // Protobuf also refuses a string field that is not UTF-8 (proto3), so
    // nothing accepted here changes when it is encoded again.
    return fmt::format(
        "header frame of {} bytes is not a dctrain envelope (garbage, truncated, or a text "
        "field that is not UTF-8)",
        header.size());
  }
  if (out.envelope.body_case() == v1::Envelope::BODY_NOT_SET) {
    return "envelope carries no message body";
  }
  size_t expected_frames = 0;
  for (const v1::TensorHeader& t : out.envelope.tensors()) {
    if (t.count() > (uint64_t{1} << 34)) {
      return fmt::format("tensor '{}' claims {} floats, more than any model", t.name(), t.count());
    }
    expected_frames += frames_for(t.count());
  }
  if (parts.size() - 1 != expected_frames) {
    return fmt::format("{} tensor frames follow the header, the tensor list needs {}",
                       parts.size() - 1, expected_frames);
  }
  size_t part = 1;
  for (const v1::TensorHeader& t : out.envelope.tensors()) {
    for (uint64_t begin = 0; begin < t.count(); begin += kMaxFrameFloats, ++part) {
      const uint64_t n = std::min<uint64_t>(kMaxFrameFloats, t.count() - begin);
      if (parts[part].size() != n * sizeof(float)) {
        return fmt::format("tensor '{}': frame {} has {} bytes, expected {}", t.name(), part,
                           parts[part].size(), n * sizeof(float));
      }
    }
  }
  out.frames.clear();
  out.frames.reserve(expected_frames);
  for (size_t i = 1; i < parts.size(); ++i) out.frames.push_back(std::move(parts[i]));
  return std::nullopt;
}

size_t first_frame_of(const v1::Envelope& envelope, size_t index) {
  size_t frame = 0;
  for (size_t i = 0; i < index; ++i)
    frame += frames_for(envelope.tensors(static_cast<int>(i)).count());
  return frame;
}

std::vector<std::span<const std::byte>> tensor_bytes(const Message& message, size_t index) {
  const size_t first = first_frame_of(message.envelope, index);
  const size_t frames = frames_for(message.envelope.tensors(static_cast<int>(index)).count());
  std::vector<std::span<const std::byte>> out;
  out.reserve(frames);
  for (size_t f = first; f < first + frames; ++f) {
    const zmq::message_t& frame = message.frames[f];
    out.emplace_back(static_cast<const std::byte*>(frame.data()), frame.size());
  }
  return out;
}

void copy_tensor(const Message& message, size_t index, std::span<float> out) {
  size_t frame = first_frame_of(message.envelope, index);
  for (size_t begin = 0; begin < out.size(); begin += kMaxFrameFloats, ++frame) {
    const zmq::message_t& f = message.frames[frame];
    std::memcpy(out.data() + begin, f.data(), f.size());
  }
}

void add_tensor_into(const Message& message, size_t index, std::span<float> acc) {
  size_t frame = first_frame_of(message.envelope, index);
  for (size_t begin = 0; begin < acc.size(); begin += kMaxFrameFloats, ++frame) {
    const zmq::message_t& f = message.frames[frame];
    const size_t n = f.size() / sizeof(float);
    const auto* bytes = static_cast<const unsigned char*>(f.data());
    float* a = acc.data() + begin;
    // Frames are not guaranteed float-aligned; read through memcpy in blocks.
    constexpr size_t kBlock = 1024;
    float block[kBlock];
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t m = std::min(kBlock, n - i);
      std::memcpy(block, bytes + i * sizeof(float), m * sizeof(float));
      for (size_t j = 0; j < m; ++j) a[i + j] += block[j];
    }
  }
}

}  // namespace dctrain
