// Tensors as raw frames: chunking at 16 MiB, round trips, tensors sent from
// their own buffer (kept alive by their frames), and the decoder's
// refusal of garbage, truncated and inconsistent messages.
#include "comm/framing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

#include "comm/envelope.h"
#include "comm/validation.h"

namespace dctrain {
namespace {

std::vector<zmq::message_t> copy_parts(std::vector<zmq::message_t>& parts) {
  std::vector<zmq::message_t> out;
  for (auto& p : parts) out.emplace_back(p.data(), p.size());
  return out;
}

Message contribution_with(std::span<const float> gradient) {
  Message m;
  m.envelope = make_envelope(4, "w0");
  m.envelope.mutable_contribution()->set_samples(16);
  add_tensor(m, "gradient", gradient);
  return m;
}

TEST(Framing, FramesForCountsChunksOf16MiB) {
  EXPECT_EQ(frames_for(0), 0u);
  EXPECT_EQ(frames_for(1), 1u);
  EXPECT_EQ(frames_for(kMaxFrameFloats), 1u);
  EXPECT_EQ(frames_for(kMaxFrameFloats + 1), 2u);
  EXPECT_EQ(frames_for(4'367'546), 2u);  // bert-tiny: 17.5 MB in two frames
}

TEST(Framing, LargeTensorRoundTripsInChunks) {
  std::vector<float> values(kMaxFrameFloats + 12345);
  std::iota(values.begin(), values.end(), 0.5f);
  std::vector<float> small = {1.0f, -2.0f, 3.5f};
  Message m = contribution_with(values);
  add_tensor(m, "statistics", small);
  ASSERT_EQ(m.frames.size(), 3u);
  for (const auto& f : m.frames) EXPECT_LE(f.size(), kMaxFrameBytes);

  std::vector<zmq::message_t> parts = encode(std::move(m));
  Message back;
  ASSERT_FALSE(decode(std::move(parts), back).has_value());
  EXPECT_EQ(back.envelope.contribution().samples(), 16u);
  std::vector<float> got(values.size());
  copy_tensor(back, 0, got);
  EXPECT_EQ(got, values);
  std::vector<float> acc = {10.0f, 10.0f, 10.0f};
  add_tensor_into(back, 1, acc);
  EXPECT_EQ(acc, (std::vector<float>{11.0f, 8.0f, 13.5f}));
  const TensorSpec expected[] = {{"gradient", values.size()}, {"statistics", 3}};
  EXPECT_FALSE(check_tensors(back, expected).has_value());
}

TEST(Framing, AViewedTensorIsSentFromItsBufferWhichItsFramesKeepAlive) {
  auto buffer = std::make_shared<std::vector<float>>(kMaxFrameFloats + 7);
  std::iota(buffer->begin(), buffer->end(), -3.0f);
  const std::vector<float> values = *buffer;
  Message m;
  m.envelope = make_envelope(4, "w0");
  m.envelope.mutable_contribution()->set_samples(16);
  add_tensor_view(m, "gradient", *buffer, buffer);
  ASSERT_EQ(m.frames.size(), 2u);
  // No copy: the frames are the buffer's memory, and each holds it.
  EXPECT_EQ(m.frames[0].data(), static_cast<void*>(buffer->data()));
  EXPECT_EQ(m.frames[1].data(), static_cast<void*>(buffer->data() + kMaxFrameFloats));
  EXPECT_EQ(buffer.use_count(), 3);
  std::weak_ptr<std::vector<float>> watch = buffer;
  buffer.reset();  // the frames alone keep it now
  ASSERT_FALSE(watch.expired());

  std::vector<zmq::message_t> parts = encode(std::move(m));
  Message back;
  ASSERT_FALSE(decode(copy_parts(parts), back).has_value());
  std::vector<float> got(values.size());
  copy_tensor(back, 0, got);
  EXPECT_EQ(got, values);
  EXPECT_FALSE(watch.expired());
  parts.clear();  // as ZeroMQ does once it has sent them
  EXPECT_TRUE(watch.expired());
}

TEST(Framing, SharedBroadcastFramesCarryTheSameBytes) {
  std::vector<float> values(1000, 0.25f);
  Message m = contribution_with(values);
  Message a = share(m), b = share(m);
  ASSERT_EQ(a.frames.size(), 1u);
  EXPECT_EQ(a.frames[0], m.frames[0]);
  EXPECT_EQ(b.frames[0], m.frames[0]);
}

TEST(Framing, GarbageHeaderIsRefusedWithAReason) {
  std::vector<zmq::message_t> parts;
  parts.emplace_back(std::string("\xff\xff\xff\xff garbage that is no protobuf"));
  Message out;
  const auto problem = decode(std::move(parts), out);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("not a dctrain envelope"), std::string::npos) << *problem;
}

TEST(Framing, EmptyMessageAndEmptyBodyAreRefused) {
  Message out;
  EXPECT_TRUE(decode({}, out).has_value());
  std::vector<zmq::message_t> parts;
  parts.emplace_back(make_envelope(1, "w").SerializeAsString());
  const auto problem = decode(std::move(parts), out);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("no message body"), std::string::npos);
}

TEST(Framing, TruncatedOrMissingFramesAreRefused) {
  std::vector<float> values(100, 1.0f);
  std::vector<zmq::message_t> parts = encode(contribution_with(values));

  std::vector<zmq::message_t> truncated = copy_parts(parts);
  truncated[1] = zmq::message_t(truncated[1].data(), 396);
  Message out;
  auto problem = decode(std::move(truncated), out);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("396 bytes, expected 400"), std::string::npos) << *problem;

  std::vector<zmq::message_t> missing = copy_parts(parts);
  missing.pop_back();
  problem = decode(std::move(missing), out);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("0 tensor frames"), std::string::npos) << *problem;

  std::vector<zmq::message_t> truncated_header = copy_parts(parts);
  truncated_header[0] = zmq::message_t(truncated_header[0].data(), truncated_header[0].size() - 3);
  EXPECT_TRUE(decode(std::move(truncated_header), out).has_value());
}

TEST(Validation, WrongNameCountOrNonFiniteValuesAreRefused) {
  std::vector<float> values(10, 1.0f);
  Message ok = contribution_with(values);
  const TensorSpec right[] = {{"gradient", 10}};
  EXPECT_FALSE(check_tensors(ok, right).has_value());
  const TensorSpec other_count[] = {{"gradient", 11}};
  EXPECT_TRUE(check_tensors(ok, other_count).has_value());
  const TensorSpec other_name[] = {{"gradients", 10}};
  EXPECT_TRUE(check_tensors(ok, other_name).has_value());
  const TensorSpec two[] = {{"gradient", 10}, {"statistics", 3}};
  EXPECT_TRUE(check_tensors(ok, two).has_value());

  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    values[7] = bad;
    Message m = contribution_with(values);
    const auto problem = check_tensors(m, right);
    ASSERT_TRUE(problem.has_value());
    EXPECT_NE(problem->find("NaN or infinite"), std::string::npos);
  }
  EXPECT_TRUE(all_finite(std::vector<float>{0.0f, -1e30f, 1e-40f}));
}

}  // namespace
}  // namespace dctrain
