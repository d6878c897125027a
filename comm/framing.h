// Tensors as raw frames beside the header. A tensor of `count` floats takes
// ceil(4 * count / kMaxFrameBytes) frames, every one full but the last, so
// no frame exceeds 16 MiB (larger frames make every receive map fresh memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/message.h"

namespace dctrain {

inline constexpr size_t kMaxFrameBytes = size_t{16} << 20;
inline constexpr size_t kMaxFrameFloats = kMaxFrameBytes / sizeof(float);

// Frames a tensor of `count` floats occupies (0 for an empty tensor).
size_t frames_for(uint64_t count);

// Appends `values` to `message` as tensor `name`: one copy into new frames.
void add_tensor(Message& message, std::string name, std::span<const float> values);

// The same without the copy: the frames point into `values`, and each holds
// a reference to `owner`, which keeps that memory alive until ZeroMQ is done
// with the frame. The values must not change while such a frame lives:
// owner.use_count() > 1 says one may.
void add_tensor_view(Message& message, std::string name, std::span<const float> values,
                     const std::shared_ptr<const void>& owner);

// A copy of `message` whose frames share the original's buffers (reference
// counted by ZeroMQ), for broadcasting one buffer to many peers.
Message share(Message& message);

// The parts to send: the serialised header, then the frames (moved out).
std::vector<zmq::message_t> encode(Message&& message);

// Parses `parts` (header first) into `out`. Returns why it cannot, or nothing.
// Checks the header parses, carries a body, and that the frames match the
// tensor list exactly; not the protocol version nor the contents.
std::optional<std::string> decode(std::vector<zmq::message_t>&& parts, Message& out);

// The first frame index of tensor `index`.
size_t first_frame_of(const v1::Envelope& envelope, size_t index);

// The bytes of tensor `index` of a decoded message, frame by frame, in order.
std::vector<std::span<const std::byte>> tensor_bytes(const Message& message, size_t index);

// Copies tensor `index` of a decoded message into `out` (sized to its count).
void copy_tensor(const Message& message, size_t index, std::span<float> out);

// acc += tensor `index` of a decoded message (sized to its count).
void add_tensor_into(const Message& message, size_t index, std::span<float> acc);

}  // namespace dctrain
