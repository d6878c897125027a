// A fixed set of compute threads running parallel loops over independent
// items (samples of a micro-batch, chunks of a gradient).
//
// Why over samples and not inside BLAS: the GEMMs of these models are narrow
// (16 x 1024 x 144 per image in ResNet-20's first stage); folding the batch
// into one GEMM or giving OpenBLAS a second thread loses more than it gains,
// while one single-threaded GEMM per sample on each core keeps every core
// busy. So constructing a pool sets OpenBLAS to one thread
// (openblas_set_num_threads(1), process-wide): two thread pools never nest.
//
// Determinism: parallel_for decides only WHO runs an item, never what an item
// computes or where it writes. Callers that reduce give each item (not each
// thread) its own partial buffer and sum the partials in index order, so the
// result is bit-identical whatever the thread count.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace dctrain {

class ThreadPool {
 public:
  // threads >= 1 compute threads in all: the calling thread plus threads - 1
  // workers started here. Throws std::invalid_argument for threads < 1.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Runs fn(index, thread) for every index in [0, count), thread in
  // [0, size()) naming the thread that runs it (for per-thread scratch), and
  // returns when all are done. Items are handed out dynamically. The first
  // exception thrown by fn is rethrown here, after every item has finished
  // or been skipped. Allocates nothing. Not reentrant: fn must not call
  // parallel_for on the same pool.
  template <typename Fn>
  void parallel_for(int64_t count, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(count, Task{&fn, [](void* f, int64_t index, int thread) {
                      (*static_cast<F*>(f))(index, thread);
                    }});
  }

 private:
  struct Task {
    void* fn = nullptr;
    void (*call)(void*, int64_t, int) = nullptr;
  };
  void run(int64_t count, Task task);
  void work(int thread);
  void drain(int thread);

  int threads_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  // Written under mutex_; atomic so that a polling thread may read them
  // without it.
  std::atomic<uint64_t> generation_ = 0;  // bumped for every parallel_for
  std::atomic<bool> stopping_ = false;
  Task task_;
  int64_t count_ = 0;
  int64_t next_ = 0;                   // next item to hand out
  std::atomic<int64_t> finished_ = 0;  // items run or skipped (under mutex_ too)
  std::exception_ptr error_;
  std::vector<std::jthread> workers_;
};

}  // namespace dctrain
