#include "comm/envelope.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dctrain
