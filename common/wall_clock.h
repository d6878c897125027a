// The wall clock as Unix microseconds: the stamps another process compares
// with its own clock (heartbeats, for the trace's clock offsets) and ids that
// must order across processes (the exchange's run). Programs read the
// system's; a test or a replay injects its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace dctrain {

using WallClock = std::function<uint64_t()>;

inline uint64_t system_unix_micros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace dctrain
