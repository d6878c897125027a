// A cap on the connections a bound ZeroMQ socket holds. ZeroMQ accepts every
// incoming connection and has no limit of its own, so a peer that opens
// thousands holds as many descriptors here (until the process cannot open
// the ones it needs). A thread reads the socket's monitor and keeps two
// counts:
//
// - authenticated connections: those over which this side has sent more
//   than its part of the handshake before it is done (TCP_INFO's bytes
//   sent: with CURVE, the greeting and WELCOME; READY goes out only once
//   the ZAP handler admitted the peer's key). Beyond `limit`, a connection
//   that authenticates is shut down (ZeroMQ closes it at once; its
//   reconnecting peer comes back later, and is let in once fewer are open).
// - pending ones, not authenticated yet: bounded on their own; when a new
//   one comes while `limit` are pending, the oldest pending one is shut
//   down, and one pending past the handshake deadline is too. A bare TCP
//   connection, or one whose key no member admits, never authenticates:
//   however many an outsider opens, it holds none of the members' places,
//   and a member's connection (authenticated within its handshake's round
//   trips) is evicted only by a flood of new connections within that time.
//
// Monitor events carry the descriptor only when a connection is accepted
// or closed (ZeroMQ's handshake events carry none), hence TCP_INFO.
// Connections that are not TCP (ipc://) count as authenticated at once.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <zmq.hpp>

namespace dctrain {

class ConnectionCap {
 public:
  // What the bound socket sends before a connection's handshake is done:
  // the ZMTP greeting (64 bytes), and with CURVE the WELCOME (170 bytes).
  static constexpr uint64_t kNullHandshakeBytes = 64;
  static constexpr uint64_t kCurveHandshakeBytes = 64 + 170;

  // Watches `socket` (bound, owned by the calling thread) from now on.
  // `handshake_bytes`: one of the above, for the socket's mechanism;
  // `handshake_deadline`: how long a connection may stay pending.
  ConnectionCap(zmq::context_t& context, zmq::socket_t& socket, size_t limit,
                uint64_t handshake_bytes, std::chrono::milliseconds handshake_deadline);
  // Stops watching; call on the socket's thread, before the socket closes.
  ~ConnectionCap();
  ConnectionCap(const ConnectionCap&) = delete;
  ConnectionCap& operator=(const ConnectionCap&) = delete;

  void set_limit(size_t limit) { limit_.store(limit); }
  size_t limit() const { return limit_.load(); }
  // Connections open now, pending or authenticated (as far as the monitor
  // has said).
  size_t open() const { return open_.load(); }
  // Of those, authenticated.
  size_t authenticated() const { return authenticated_.load(); }
  // Connections shut down for being over a bound or past the handshake
  // deadline, since the start.
  uint64_t refused() const { return refused_.load(); }

 private:
  void watch(const std::string& endpoint);

  zmq::context_t& context_;
  zmq::socket_t& socket_;
  std::atomic<size_t> limit_;
  const uint64_t handshake_bytes_;
  const std::chrono::milliseconds handshake_deadline_;
  std::atomic<size_t> open_{0};
  std::atomic<size_t> authenticated_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dctrain
