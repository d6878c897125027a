#include "model/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <vector>

namespace dctrain {
namespace {

TEST(ThreadPool, RunsEveryItemExactlyOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t count : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
      std::atomic<bool> bad_thread{false};
      pool.parallel_for(count, [&](int64_t i, int thread) {
        if (thread < 0 || thread >= threads) bad_thread = true;
        hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
      EXPECT_FALSE(bad_thread.load());
    }
  }
}

TEST(ThreadPool, ManyLoopsInARow) {
  ThreadPool pool(2);
  int64_t total = 0;
  for (int round = 0; round < 2000; ++round) {
    std::vector<int64_t> out(5, 0);
    pool.parallel_for(5, [&](int64_t i, int) { out[static_cast<size_t>(i)] = i + round; });
    for (int64_t v : out) total += v;
  }
  EXPECT_EQ(total, 2000 * 10 + 5 * (1999 * 2000 / 2));
}

TEST(ThreadPool, RethrowsTheItemsException) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](int64_t i, int) {
                                   if (i == 37) throw std::runtime_error("item 37");
                                 }),
               std::runtime_error);
  // Still usable afterwards.
  std::atomic<int> n{0};
  pool.parallel_for(10, [&](int64_t, int) { ++n; });
  EXPECT_EQ(n.load(), 10);
}

// Every loop's items are counted whether they ran, threw or were skipped:
// a miscount would return before an item ends or wait forever.
TEST(ThreadPool, EveryLoopEndsAfterItsItemsWhenOneThrows) {
  ThreadPool pool(3);
  for (int round = 0; round < 300; ++round) {
    const int64_t thrower = round % 8;
    std::atomic<int> ran{0};
    EXPECT_THROW(pool.parallel_for(8,
                                   [&](int64_t i, int) {
                                     if (i == thrower) throw std::runtime_error("item");
                                     ++ran;
                                   }),
                 std::runtime_error);
    EXPECT_LE(ran.load(), 7);
    std::vector<int> out(8, 0);
    pool.parallel_for(8, [&](int64_t i, int) { out[static_cast<size_t>(i)] = 1; });
    EXPECT_EQ(std::count(out.begin(), out.end(), 1), 8) << "round " << round;
  }
}

TEST(ThreadPool, RejectsZeroThreads) {
  EXPECT_THROW(ThreadPool(0), std::invalid_argument);
}

}  // namespace
}  // namespace dctrain
