#include "model/thread_pool.h"

#include <cblas.h>

#include <stdexcept>
#include <string>

namespace dctrain {

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
    {
      std::lock_guard lock(mutex_);
      if (next_ >= count_) return;
      index = next_++;
    }
    try {
      task_.call(task_.fn, index, thread);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_ = count_;  // skip what is left
    }
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
    error_ = nullptr;
    busy_ = threads_ - 1;
    ++generation_;
  }
  start_.notify_all();
  drain(0);
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::work(int thread) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    drain(thread);
    {
      std::lock_guard lock(mutex_);
      --busy_;
    }
    done_.notify_one();
  }
}

}  // namespace dctrain
