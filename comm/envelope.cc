#include "comm/envelope.h"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

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

std::string deterministic_bytes(const v1::Envelope& envelope) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    envelope.SerializeToCodedStream(&coded);
  }  // flushed into `out` here
  return out;
}

}  // namespace dctrain
