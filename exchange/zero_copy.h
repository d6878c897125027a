// Messages that ZeroMQ sends straight from the caller's memory, and the
// count of those it still holds, per destination. ZeroMQ reads such a
// buffer from its I/O thread until the bytes are in the kernel, so the
// caller may touch the buffer again only once every message over it has
// been released: wait_all() says when. A destination whose messages are
// stuck (a peer that stopped reading) is cut loose by closing its socket,
// which makes ZeroMQ drop, and so release, what it queued.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>
#include <zmq.hpp>

namespace dctrain {

class ReleaseTracker {
 public:
  explicit ReleaseTracker(size_t destinations);
  // Waits until everything is released: ZeroMQ must not call back into a
  // destroyed tracker.
  ~ReleaseTracker();
  ReleaseTracker(const ReleaseTracker&) = delete;
  ReleaseTracker& operator=(const ReleaseTracker&) = delete;

  // A message over [data, data + bytes) for `destination`; counted until
  // ZeroMQ releases it (or the message is destroyed unsent).
  zmq::message_t wrap(size_t destination, const void* data, size_t bytes);
  // A message over a copy of [data, data + bytes), counted the same way, so
  // that waiting for the releases also means "written to the kernel" when
  // sends are copied (a socket closed before that would drop them).
  zmq::message_t copy(size_t destination, const void* data, size_t bytes);

  size_t in_flight(size_t destination) const;
  size_t in_flight() const;
  // Waits until no message of any destination is held, or `deadline`;
  // true when none is.
  bool wait_all(std::chrono::steady_clock::time_point deadline) const;
  // Waits until `destination` holds none (no limit: call it only after its
  // socket was closed, when ZeroMQ's release is certain and prompt).
  void wait_released(size_t destination) const;

 private:
  struct Slot {
    ReleaseTracker* tracker = nullptr;
    size_t destination = 0;
  };
  static void released(void* data, void* hint);
  static void released_copy(void* data, void* hint);
  void count_in(size_t destination);

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<size_t> held_;  // per destination
  size_t total_ = 0;
  std::vector<Slot> slots_;  // never resized: ZeroMQ holds pointers to them
};

}  // namespace dctrain
