#include "exchange/zero_copy.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace dctrain {

ReleaseTracker::ReleaseTracker(size_t destinations) : held_(destinations, 0), slots_(destinations) {
  for (size_t d = 0; d < destinations; ++d) slots_[d] = Slot{this, d};
}

ReleaseTracker::~ReleaseTracker() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return total_ == 0; });
}

void ReleaseTracker::count_in(size_t destination) {
  std::lock_guard lock(mutex_);
  ++held_[destination];
  ++total_;
}

zmq::message_t ReleaseTracker::wrap(size_t destination, const void* data, size_t bytes) {
  if (bytes == 0) return zmq::message_t();
  count_in(destination);
  // ZeroMQ only reads the buffer; its C API takes it as non-const.
  return zmq::message_t(const_cast<void*>(data), bytes, &ReleaseTracker::released,
                        &slots_[destination]);
}

zmq::message_t ReleaseTracker::copy(size_t destination, const void* data, size_t bytes) {
  if (bytes == 0) return zmq::message_t();
  // Owned by the message from here on: ZeroMQ frees it through
  // released_copy(), also when the message is dropped unsent.
  void* buffer = std::malloc(bytes);
  if (buffer == nullptr) throw std::bad_alloc();
  std::memcpy(buffer, data, bytes);
  count_in(destination);
  return zmq::message_t(buffer, bytes, &ReleaseTracker::released_copy, &slots_[destination]);
}

void ReleaseTracker::released_copy(void* data, void* hint) {
  std::free(data);
  released(data, hint);
}

void ReleaseTracker::released(void* /*data*/, void* hint) {
  auto* slot = static_cast<Slot*>(hint);
  ReleaseTracker& t = *slot->tracker;
  std::lock_guard lock(t.mutex_);
  --t.held_[slot->destination];
  --t.total_;
  // Notified under the lock: once the waiter sees zero it may destroy the
  // tracker, which must not happen while this call still touches it.
  if (t.total_ == 0 || t.held_[slot->destination] == 0) t.changed_.notify_all();
}

size_t ReleaseTracker::in_flight(size_t destination) const {
  std::lock_guard lock(mutex_);
  return held_[destination];
}

size_t ReleaseTracker::in_flight() const {
  std::lock_guard lock(mutex_);
  return total_;
}

bool ReleaseTracker::wait_all(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_until(lock, deadline, [this] { return total_ == 0; });
}

void ReleaseTracker::wait_released(size_t destination) const {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this, destination] { return held_[destination] == 0; });
}

}  // namespace dctrain
