#include "comm/validation.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

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

std::optional<std::string> check_tensor_layout(const Message& message,
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
    frame += n;
  }
  return std::nullopt;
}

std::optional<std::string> check_tensors(const Message& message,
                                         std::span<const TensorSpec> expected) {
  if (auto problem = check_tensor_layout(message, expected)) return problem;
  const auto& tensors = message.envelope.tensors();
  size_t frame = 0;
  for (const v1::TensorHeader& t : tensors) {
    const size_t n = frames_for(t.count());
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

std::optional<std::string> contribution_totals_problem(const v1::Contribution& c, uint64_t samples,
                                                       uint64_t max_terms_per_sample) {
  if (c.samples() != samples) {
    return fmt::format("it claims {} samples, its completed micro-batches hold {}", c.samples(),
                       samples);
  }
  if (!std::isfinite(c.loss_sum()) || c.loss_sum() < 0.0) {
    return fmt::format("its loss sum {} is not a finite, non-negative number", c.loss_sum());
  }
  if (!std::isfinite(c.compute_seconds()) || c.compute_seconds() < 0.0 ||
      !std::isfinite(c.overhead_seconds()) || c.overhead_seconds() < 0.0) {
    return fmt::format("its compute time {} or overhead {} is negative or not finite",
                       c.compute_seconds(), c.overhead_seconds());
  }
  // samples * max_terms_per_sample, saturating: neither is bounded by the
  // wire, and an overflow would let any count through.
  const uint64_t most =
      max_terms_per_sample != 0 &&
              samples > std::numeric_limits<uint64_t>::max() / max_terms_per_sample
          ? std::numeric_limits<uint64_t>::max()
          : samples * max_terms_per_sample;
  if (c.loss_terms() > most) {
    return fmt::format(
        "it claims {} loss terms from {} samples, at most {} per sample are possible (a worker "
        "of another model or release?)",
        c.loss_terms(), samples, max_terms_per_sample);
  }
  if (c.loss_terms() == 0 && c.loss_sum() != 0.0) {
    return fmt::format("it claims a loss sum of {} over no loss terms", c.loss_sum());
  }
  if (c.correct() > c.loss_terms()) {
    return fmt::format("it claims {} correct predictions among {} loss terms", c.correct(),
                       c.loss_terms());
  }
  return std::nullopt;
}

uint64_t max_loss_terms_per_sample(const v1::ModelConfig& model) {
  if (model.name() != v1::MODEL_BERT_TINY && model.name() != v1::MODEL_BERT) return 1;
  // Every scored (masked) token is a term; a sequence holds at most
  // max_seq_len tokens (0 stands for the default, 128).
  return model.max_seq_len() > 0 ? static_cast<uint64_t>(model.max_seq_len()) : 128;
}

std::string peer_text(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  size_t cut = limit;
  // Not inside a UTF-8 sequence: back up over continuation bytes.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return fmt::format("{}... ({} bytes in all)", text.substr(0, cut), text.size());
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
    case v1::Envelope::kExchangeSum:
      return "exchange sum";
    case v1::Envelope::kSumRequest:
      return "sum request";
    case v1::Envelope::kExchangeCancel:
      return "exchange cancel";
    case v1::Envelope::kRoundCheckRequest:
      return "round check request";
    case v1::Envelope::kRoundCheckAnswer:
      return "round check answer";
    case v1::Envelope::BODY_NOT_SET:
      break;
  }
  return "empty message";
}

}  // namespace dctrain
