#include "exchange/round_cancel.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace dctrain {

RoundCancel::RoundCancel() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd for RoundCancel");
}

RoundCancel::~RoundCancel() { ::close(fd_); }

void RoundCancel::end_through(const ExchangeRound& through) {
  {
    std::lock_guard lock(mutex_);
    if (any_ && through <= mark_) return;
    any_ = true;
    mark_ = through;
  }
  const uint64_t one = 1;
  // A full counter (2^64 - 2 wake-ups unread) still leaves the fd readable.
  [[maybe_unused]] const ssize_t n = ::write(fd_, &one, sizeof one);
}

bool RoundCancel::ended(const ExchangeRound& round) const {
  std::lock_guard lock(mutex_);
  return any_ && round <= mark_;
}

void RoundCancel::drain() const {
  uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(fd_, &count, sizeof count);
}

}  // namespace dctrain
