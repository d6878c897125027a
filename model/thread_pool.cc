#include "model/thread_pool.h"

#include <cblas.h>

#include <chrono>
#include <stdexcept>
#include <string>

namespace dctrain {
namespace {

// How long a thread polls before it sleeps: a worker after its items, the
// calling thread for the last items. Loops at micro-batch 16 come tens of
// microseconds apart, and putting a thread to sleep and waking it (a futex
// each way) costs about as much, so a short poll keeps them on the core.
// Bounded, so an idle pool sleeps and leaves the core to other processes.
constexpr auto kPoll = std::chrono::microseconds(50);

template <typename Ready>
bool poll(Ready ready) {
  const auto until = std::chrono::steady_clock::now() + kPoll;
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(threads) {
  if (threads < 1) {
    throw std::invalid_argument("thread pool: " + std::to_string(threads) +
                                " threads requested; use at least 1");
  }
  openblas_set_num_threads(1);
  workers_.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { work(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  // jthread joins on destruction.
}

void ThreadPool::drain(int thread) {
  for (;;) {
    int64_t index;
    Task task;
    {
      // The item and its task are taken together: a thread that wakes late
      // either finds nothing left or takes a later loop's item with that
      // loop's task.
      std::lock_guard lock(mutex_);
      if (next_ >= count_) return;
      index = next_++;
      task = task_;
    }
    int64_t finished = 1;
    try {
      task.call(task.fn, index, thread);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      finished += count_ - next_;  // what is left is skipped
      next_ = count_;
    }
    bool last;
    {
      std::lock_guard lock(mutex_);
      last = finished_.fetch_add(finished) + finished == count_;
    }
    if (last && thread != 0) done_.notify_one();
  }
}

void ThreadPool::run(int64_t count, Task task) {
  if (count <= 0) return;
  if (threads_ == 1 || count == 1) {
    for (int64_t i = 0; i < count; ++i) task.call(task.fn, i, 0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    task_ = task;
    count_ = count;
    next_ = 0;
    finished_ = 0;
    error_ = nullptr;
    generation_.fetch_add(1);
  }
  start_.notify_all();
  drain(0);
  // Waits for the items, not for the workers: a worker still asleep when
  // the calling thread has run every item costs nothing (small loops, as at
  // micro-batch 16, are often all done before a worker wakes).
  poll([this] { return finished_.load() == count_; });
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return finished_ == count_; });
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::work(int thread) {
  uint64_t seen = 0;
  for (;;) {
    poll([&] { return generation_.load() != seen || stopping_.load(); });
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    drain(thread);
  }
}

}  // namespace dctrain
