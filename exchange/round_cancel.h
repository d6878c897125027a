// Ends an exchange round from another thread. The worker's session (its I/O
// thread) learns from the coordinator that a round is over (a member died,
// a later attempt of the step was planned, the step was dropped) while the
// compute thread sits in ExchangePeer::exchange() waiting for pieces that
// will never come. The session raises a mark, "every round up to R is
// over"; the exchange polls the mark's file descriptor beside its sockets,
// so it wakes at once, and ends any round at or below the mark as if its
// deadline had passed (it reports what it has, and lets go of its buffers).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "exchange/chunk.h"

namespace dctrain {

class RoundCancel {
 public:
  RoundCancel();  // throws std::system_error when no eventfd can be made
  ~RoundCancel();
  RoundCancel(const RoundCancel&) = delete;
  RoundCancel& operator=(const RoundCancel&) = delete;

  // Every round up to and including `through` is over. The mark only rises:
  // a lower one than already raised changes nothing. Thread-safe.
  void end_through(const ExchangeRound& through);
  // Whether `round` is at or below the mark. Thread-safe.
  bool ended(const ExchangeRound& round) const;
  // Readable after end_through(); poll it with POLLIN, then call drain().
  int fd() const { return fd_; }
  void drain() const;

 private:
  int fd_ = -1;
  mutable std::mutex mutex_;
  bool any_ = false;
  ExchangeRound mark_{};
};

}  // namespace dctrain
