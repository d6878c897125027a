#include "comm/envelope.h"

#include <fmt/format.h>

#include "common/version.h"

namespace dctrain {

v1::Envelope make_envelope(uint64_t step, std::string sender) {
  v1::Envelope envelope;
  envelope.set_protocol_version(kProtocolVersion);
  envelope.set_step(step);
  envelope.set_sender(std::move(sender));
  return envelope;
}

std::optional<std::string> version_problem(const v1::Envelope& envelope) {
  if (envelope.protocol_version() == kProtocolVersion) return std::nullopt;
  return fmt::format(
      "peer '{}' speaks protocol version {}, this build speaks {} (dctrain {}); "
      "run the same dctrain release on every host",
      envelope.sender(), envelope.protocol_version(), kProtocolVersion, kVersion);
}

}  // namespace dctrain
