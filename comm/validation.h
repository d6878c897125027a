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

// The tensors are exactly `expected`, in order, and every value is finite.
std::optional<std::string> check_tensors(const Message& message,
                                         std::span<const TensorSpec> expected);

// True when no value is NaN or infinite.
bool all_finite(std::span<const float> values);

// The name of the message body, for logs ("plan", "contribution", ...).
std::string_view body_name(const v1::Envelope& envelope);

}  // namespace dctrain
