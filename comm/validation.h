// Checks on a decoded message before anything uses it: protocol version,
// tensors by name and size against what the receiver's model expects, and
// finite values. Each returns why the message is unacceptable, or nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "comm/message.h"

namespace dctrain {

struct TensorSpec {
  std::string_view name;
  uint64_t count = 0;
};

// The tensors are exactly `expected`, in order, with their frames; values
// not read.
std::optional<std::string> check_tensor_layout(const Message& message,
                                               std::span<const TensorSpec> expected);
// The tensors are exactly `expected`, in order, and every value is finite.
std::optional<std::string> check_tensors(const Message& message,
                                         std::span<const TensorSpec> expected);

// The totals and clocks of a contribution against its plan: `samples` is
// what the micro-batches it lists as completed hold (the caller checked
// those ids against the plan), `max_terms_per_sample` the loss terms one
// sample can give (max_loss_terms_per_sample). The loss sum and both clocks
// are finite and not negative, the samples are those of its completed
// micro-batches, the loss terms at most `max_terms_per_sample` per sample
// (none when nothing was completed) and its correct predictions at most its
// loss terms: the coordinator divides the step's loss sum and correct count
// by the summed terms, and weighs the gradient by them.
std::optional<std::string> contribution_totals_problem(const v1::Contribution& contribution,
                                                       uint64_t samples,
                                                       uint64_t max_terms_per_sample);

// The loss terms one sample gives at most: one for the classifiers, one per
// token (the sequence length) for masked-language-model training.
uint64_t max_loss_terms_per_sample(const v1::ModelConfig& model);

// True when no value is NaN or infinite.
bool all_finite(std::span<const float> values);

// The name of the message body, for logs ("plan", "contribution", ...).
std::string_view body_name(const v1::Envelope& envelope);

// Text a peer sent (an error, a reason), as it may go into a log: at most
// `limit` bytes of it, cut at a character's start, and "... (N bytes in
// all)" after it when it was longer. A peer cannot grow the log by more
// than this a message.
inline constexpr size_t kPeerTextLimit = 256;
std::string peer_text(std::string_view text, size_t limit = kPeerTextLimit);

}  // namespace dctrain
