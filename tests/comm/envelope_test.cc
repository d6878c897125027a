#include "comm/envelope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/framing.h"
#include "common/version.h"

namespace dctrain {
namespace {

TEST(Envelope, CarriesVersionStepAndSender) {
  const v1::Envelope envelope = make_envelope(17, "worker-3");
  EXPECT_EQ(envelope.protocol_version(), kProtocolVersion);
  EXPECT_EQ(envelope.step(), 17u);
  EXPECT_EQ(envelope.sender(), "worker-3");
  EXPECT_FALSE(version_problem(envelope).has_value());
}

TEST(Envelope, SurvivesSerialisation) {
  v1::Envelope envelope = make_envelope(3, "w");
  envelope.mutable_hello()->set_worker_name("w");
  envelope.mutable_hello()->set_threads(2);
  v1::Envelope parsed;
  ASSERT_TRUE(parsed.ParseFromString(envelope.SerializeAsString()));
  EXPECT_EQ(parsed.body_case(), v1::Envelope::kHello);
  EXPECT_EQ(parsed.hello().threads(), 2u);
}

TEST(Envelope, OtherProtocolVersionIsExplained) {
  v1::Envelope envelope = make_envelope(0, "old-worker");
  envelope.set_protocol_version(kProtocolVersion + 1);
  const auto problem = version_problem(envelope);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("old-worker"), std::string::npos);
  EXPECT_NE(problem->find("protocol version " + std::to_string(kProtocolVersion + 1)),
            std::string::npos);
}

std::vector<zmq::message_t> header_only(const std::string& header) {
  std::vector<zmq::message_t> parts;
  parts.emplace_back(header.data(), header.size());
  return parts;
}

// The envelope fuzz target's round-trip property was reported as failing on
// "non-UTF-8 bytes in a string field": Protobuf's log line about such a
// field belongs to an input that decode refused just before. A string field
// that is not UTF-8 never decodes (proto3), and the refusal says so.
TEST(Envelope, DecodeRefusesTextFieldsThatAreNotUtf8) {
  const std::string bad = "run \xff\xfe the same release";
  std::vector<v1::Envelope> envelopes(4, make_envelope(1, "coordinator"));
  envelopes[0].mutable_refusal()->set_reason(bad);
  envelopes[1].set_sender(bad);
  envelopes[1].mutable_heartbeat();
  (*envelopes[2].mutable_contribution()->mutable_trace()->add_events()->mutable_args())[bad] = 1.0;
  envelopes[3].mutable_plan()->mutable_exchange()->add_member_endpoints(bad);
  for (const v1::Envelope& envelope : envelopes) {
    Message out;
    const auto problem = decode(header_only(envelope.SerializeAsString()), out);
    ASSERT_TRUE(problem.has_value()) << envelope.DebugString();
    EXPECT_NE(problem->find("not UTF-8"), std::string::npos) << *problem;
  }
  v1::Envelope good = make_envelope(1, "coordinator");
  good.mutable_refusal()->set_reason("r\xc3\xa9sum\xc3\xa9 \xf0\x9f\x9a\x80");
  Message out;
  EXPECT_FALSE(decode(header_only(good.SerializeAsString()), out).has_value());
  EXPECT_EQ(out.envelope.refusal().reason(), good.refusal().reason());
}

// The input fuzz/envelope_fuzz.cc found (its header frame): a contribution
// whose trace event's arg "id" is a NaN. NaN is a value the protocol carries
// (a diverged worker's loss, which the coordinator's guard counts), and it
// comes back bit for bit; a field-by-field comparison called it changed
// because NaN is unequal to itself.
TEST(Envelope, NaNInANumberFieldComesBackBitForBit) {
  const std::string found(
      "\x1a\x01\x61\x8a\x01\x3f\xa2\x06\x09\x1a\x07\x74\x69\x6d\x65\x6f\x75\x74\xc2\x0c\x30"
      "\x2a\x2e\x12\x0b\x6d\x69\x63\x72\x6f\x2d\x62\x61\x74\x63\x68\x32\x10\x0a\x05\x64\x65"
      "\x6c\x61\x79\x11\x00\x00\x00\x00\x00\x00\xe0\x3f\x32\x0d\x0a\x02\x69\x64\x11\x00\x00"
      "\x00\x00\x00\x40\xff\xff",
      69);
  Message decoded;
  ASSERT_FALSE(decode(header_only(found), decoded).has_value());
  const auto& args = decoded.envelope.contribution().trace().events(0).args();
  ASSERT_TRUE(args.contains("id"));
  EXPECT_TRUE(std::isnan(args.at("id")));
  Message copy;
  copy.envelope = decoded.envelope;
  Message again;
  ASSERT_FALSE(decode(encode(std::move(copy)), again).has_value());
  EXPECT_EQ(deterministic_bytes(again.envelope), deterministic_bytes(decoded.envelope));
  // A loss of NaN too, as a diverged worker sends it.
  v1::Envelope diverged = make_envelope(4, "w");
  diverged.mutable_contribution()->set_loss_sum(std::nan(""));
  Message back;
  ASSERT_FALSE(decode(header_only(diverged.SerializeAsString()), back).has_value());
  EXPECT_TRUE(std::isnan(back.envelope.contribution().loss_sum()));
  EXPECT_EQ(deterministic_bytes(back.envelope), deterministic_bytes(diverged));
}

}  // namespace
}  // namespace dctrain
