// The coordinator's ROUTER under its limits, over tcp://127.0.0.1: a frame
// beyond the model's largest closes that peer's connection and delivers
// nothing while other peers go on; a peer that does not read gets at most
// its queue, the rest dropped and counted; a closed connection names the
// peer whose messages came on it; a second connection with a connected
// peer's name is never heard.
#include "comm/transport_limits.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

#include <chrono>
#include <thread>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/transport.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<spdlog::logger> quiet() {
  return std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
}

zmq::socket_t dealer(zmq::context_t& context, const std::string& name,
                     const std::string& endpoint) {
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::routing_id, name);
  s.set(zmq::sockopt::linger, 0);
  s.connect(endpoint);
  return s;
}

void send_heartbeat(zmq::socket_t& s, const std::string& name) {
  Message m;
  m.envelope = make_envelope(0, name);
  m.envelope.mutable_heartbeat()->set_sent_unix_micros(1);
  for (zmq::message_t& part : encode(std::move(m))) (void)s.send(part, zmq::send_flags::none);
}

// Receives until `peer`'s message arrives or `timeout` passes.
bool receive_from(RouterTransport& router, const std::string& peer,
                  std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  Received r;
  while (std::chrono::steady_clock::now() < until) {
    if (router.receive(r, 20ms) && r.peer == peer) return true;
  }
  return false;
}

TEST(TransportLimits, SizesComeFromTheModel) {
  // Small models: a header may be larger than any tensor frame.
  EXPECT_EQ(max_frame_bytes(1000, 10), kMaxHeaderBytes + kFrameWireOverheadBytes);
  EXPECT_EQ(max_frame_bytes(454922, 0), 454922 * 4 + kFrameWireOverheadBytes);
  // Tensors larger than a frame travel in 16 MiB frames.
  EXPECT_EQ(max_frame_bytes(4367546 * 2, 0),
            static_cast<int64_t>(kMaxFrameBytes) + kFrameWireOverheadBytes);
  EXPECT_EQ(queued_messages_for(4367546, 0), 15);
  EXPECT_EQ(queued_messages_for(1000, 0), 1000);
  EXPECT_EQ(queued_messages_for(uint64_t{1} << 30, 0), 8);
}

TEST(TransportLimits, OversizedFrameClosesOnlyThatPeersConnection) {
  zmq::context_t context(1);
  TransportLimits limits;
  limits.max_frame_bytes = 4096;
  RouterTransport router(context, "tcp://127.0.0.1:*", quiet(), limits);
  zmq::socket_t good = dealer(context, "good", router.endpoint());
  zmq::socket_t big = dealer(context, "big", router.endpoint());
  send_heartbeat(good, "good");
  ASSERT_TRUE(receive_from(router, "good", 5s));
  send_heartbeat(big, "big");
  ASSERT_TRUE(receive_from(router, "big", 5s));

  // One frame of 8 KiB: beyond the limit.
  std::vector<char> blob(8192, 'x');
  (void)big.send(zmq::buffer(blob), zmq::send_flags::none);
  std::vector<std::string> gone;
  for (int i = 0; i < 250 && gone.empty(); ++i) {
    Received r;
    EXPECT_FALSE(router.receive(r, 20ms) && r.peer == "big") << "the oversized frame arrived";
    gone = router.take_disconnected();
  }
  ASSERT_EQ(gone, std::vector<std::string>{"big"});
  // The other peer is untouched.
  send_heartbeat(good, "good");
  EXPECT_TRUE(receive_from(router, "good", 5s));
  EXPECT_TRUE(router.take_disconnected().empty());
}

TEST(TransportLimits, PeerThatDoesNotReadGetsAtMostItsQueue) {
  zmq::context_t context(1);
  TransportLimits limits;
  limits.max_queued_messages = 4;
  RouterTransport router(context, "tcp://127.0.0.1:*", quiet(), limits);
  zmq::socket_t lagging(context, zmq::socket_type::dealer);
  lagging.set(zmq::sockopt::routing_id, std::string("lagging"));
  lagging.set(zmq::sockopt::rcvhwm, 1);
  lagging.set(zmq::sockopt::linger, 0);
  lagging.connect(router.endpoint());
  send_heartbeat(lagging, "lagging");
  ASSERT_TRUE(receive_from(router, "lagging", 5s));

  // 300 messages of 1 MiB each: whatever the kernel's socket buffers hold,
  // most of them cannot be queued.
  constexpr int kMessages = 300;
  std::vector<float> payload((1 << 20) / sizeof(float), 1.0f);
  for (int i = 0; i < kMessages; ++i) {
    Message m;
    m.envelope = make_envelope(static_cast<uint64_t>(i), "coordinator");
    m.envelope.mutable_heartbeat();
    add_tensor(m, "payload", payload);
    router.send("lagging", std::move(m));
  }
  const uint64_t accepted = kMessages - router.dropped_sends();
  std::printf("queued %llu of %d messages of 1 MiB for a peer that does not read\n",
              static_cast<unsigned long long>(accepted), kMessages);
  EXPECT_GE(router.dropped_sends(), static_cast<uint64_t>(kMessages - 64));
  EXPECT_GE(accepted, 4u);
}

TEST(TransportLimits, ClosedConnectionNamesItsPeerAndANameBelongsToItsConnection) {
  zmq::context_t context(1);
  RouterTransport router(context, "tcp://127.0.0.1:*", quiet());
  auto first = std::make_unique<zmq::socket_t>(dealer(context, "w3", router.endpoint()));
  send_heartbeat(*first, "w3");
  ASSERT_TRUE(receive_from(router, "w3", 5s));

  // Another connection under the same name: never heard while the first is
  // connected, and the first keeps its messages both ways.
  zmq::socket_t second = dealer(context, "w3", router.endpoint());
  send_heartbeat(second, "w3");
  send_heartbeat(second, "w3");
  EXPECT_FALSE(receive_from(router, "w3", 1s)) << "the second connection was heard";
  send_heartbeat(*first, "w3");
  EXPECT_TRUE(receive_from(router, "w3", 5s));
  Message to_w3;
  to_w3.envelope = make_envelope(0, "coordinator");
  to_w3.envelope.mutable_heartbeat();
  router.send("w3", std::move(to_w3));
  zmq::pollitem_t item{static_cast<void*>(*first), 0, ZMQ_POLLIN, 0};
  EXPECT_EQ(zmq::poll(&item, 1, 5000ms), 1) << "the first connection lost its messages";
  EXPECT_TRUE(router.take_disconnected().empty());

  // The first closes: its name is reported once.
  first.reset();
  std::vector<std::string> gone;
  for (int i = 0; i < 250 && gone.empty(); ++i) {
    Received r;
    router.receive(r, 20ms);
    gone = router.take_disconnected();
  }
  EXPECT_EQ(gone, std::vector<std::string>{"w3"});
  EXPECT_TRUE(router.take_disconnected().empty());
}

}  // namespace
}  // namespace dctrain
