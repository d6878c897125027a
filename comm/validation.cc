#include "comm/validation.h"

#include <fmt/format.h>

#include <cstring>

#include "comm/framing.h"

namespace dctrain {

bool all_finite(std::span<const float> values) {
  uint32_t bad = 0;
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

namespace {

bool frame_finite(const zmq::message_t& frame) {
  const auto* bytes = static_cast<const unsigned char*>(frame.data());
  const size_t n = frame.size() / sizeof(float);
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, bytes + i * sizeof(float), sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

}  // namespace

std::optional<std::string> check_tensors(const Message& message,
                                         std::span<const TensorSpec> expected) {
  const auto& tensors = message.envelope.tensors();
  if (static_cast<size_t>(tensors.size()) != expected.size()) {
    return fmt::format("{} carries {} tensors, expected {}", body_name(message.envelope),
                       tensors.size(), expected.size());
  }
  size_t frame = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const v1::TensorHeader& t = tensors[static_cast<int>(i)];
    if (t.name() != expected[i].name || t.count() != expected[i].count) {
      return fmt::format(
          "{}: tensor {} is '{}' with {} floats, expected '{}' with {} (is the peer "
          "running another model?)",
          body_name(message.envelope), i, t.name(), t.count(), expected[i].name, expected[i].count);
    }
    const size_t n = frames_for(t.count());
    if (frame + n > message.frames.size()) {
      return fmt::format("{}: tensor '{}' is missing frames", body_name(message.envelope),
                         t.name());
    }
    for (size_t k = 0; k < n; ++k) {
      if (!frame_finite(message.frames[frame + k])) {
        return fmt::format("{}: tensor '{}' holds NaN or infinite values",
                           body_name(message.envelope), t.name());
      }
    }
    frame += n;
  }
  return std::nullopt;
}

std::string_view body_name(const v1::Envelope& envelope) {
  switch (envelope.body_case()) {
    case v1::Envelope::kHello:
      return "hello";
    case v1::Envelope::kRefusal:
      return "refusal";
    case v1::Envelope::kHeartbeat:
      return "heartbeat";
    case v1::Envelope::kBye:
      return "bye";
    case v1::Envelope::kError:
      return "error";
    case v1::Envelope::kWelcome:
      return "welcome";
    case v1::Envelope::kPlan:
      return "plan";
    case v1::Envelope::kContribution:
      return "contribution";
    case v1::Envelope::kUpdate:
      return "update";
    case v1::Envelope::kReady:
      return "ready";
    case v1::Envelope::BODY_NOT_SET:
      break;
  }
  return "empty message";
}

}  // namespace dctrain
