// The worker's clock: seconds on a monotonic clock, and a sleep that passes
// on that clock. The compute loop reads it for the step compute clock (tau)
// and sleeps injected delays on it, so that delay counts as compute. The
// process uses the steady clock; a test uses a manual one whose sleep only
// moves its time on, so deadlines are tested without waiting.
#pragma once

#include <chrono>
#include <thread>

namespace dctrain {

class WorkerClock {
 public:
  virtual ~WorkerClock() = default;
  virtual double now() const = 0;
  virtual void sleep(double seconds) = 0;
};

class SteadyClock final : public WorkerClock {
 public:
  double now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void sleep(double seconds) override {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
};

// A clock whose time moves only when it is set or slept on: the tests'
// workers, and the simulator's (sim/), whose compute takes virtual time.
class ManualClock : public WorkerClock {
 public:
  double now() const override { return time; }
  void sleep(double seconds) override { time += seconds; }
  double time = 0.0;
};

}  // namespace dctrain
