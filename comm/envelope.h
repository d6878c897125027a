// The header frame every message starts with: protocol version, step, sender.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "proto/wire.pb.h"

namespace dctrain {

// The sender name of every message from the coordinator.
inline constexpr const char* kCoordinatorName = "coordinator";

// An envelope stamped with this build's protocol version.
v1::Envelope make_envelope(uint64_t step, std::string sender);

// Why `envelope` cannot be accepted by this build, or nothing when it can.
std::optional<std::string> version_problem(const v1::Envelope& envelope);

// The envelope's bytes with map entries in key order (a trace event's args
// serialize in no fixed order otherwise), so that equal envelopes give equal
// bytes, NaN payloads and unknown fields included: for comparing two.
std::string deterministic_bytes(const v1::Envelope& envelope);

}  // namespace dctrain
