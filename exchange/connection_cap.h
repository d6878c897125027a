// A cap on the connections a bound ZeroMQ socket holds. ZeroMQ accepts every
// incoming connection and has no limit of its own, so a peer that opens
// thousands holds as many descriptors here (until the process cannot open
// the ones it needs). A thread reads the socket's monitor: it counts the
// open connections and shuts down (TCP) each one accepted while `limit`
// are open, so that ZeroMQ closes it at once and its descriptor is free
// again; ZeroMQ's reconnecting peer comes back later, and is let in once
// fewer are open.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <zmq.hpp>

namespace dctrain {

class ConnectionCap {
 public:
  // Watches `socket` (bound, owned by the calling thread) from now on.
  ConnectionCap(zmq::context_t& context, zmq::socket_t& socket, size_t limit);
  // Stops watching; call on the socket's thread, before the socket closes.
  ~ConnectionCap();
  ConnectionCap(const ConnectionCap&) = delete;
  ConnectionCap& operator=(const ConnectionCap&) = delete;

  void set_limit(size_t limit) { limit_.store(limit); }
  size_t limit() const { return limit_.load(); }
  // Connections open now (as far as the monitor has said).
  size_t open() const { return open_.load(); }
  // Connections shut down for being over the limit, since the start.
  uint64_t refused() const { return refused_.load(); }

 private:
  void watch(const std::string& endpoint);

  zmq::context_t& context_;
  zmq::socket_t& socket_;
  std::atomic<size_t> limit_;
  std::atomic<size_t> open_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dctrain
