// write_file_atomically leaves the old content or the new, never a mix or a
// truncated file: seen by a reader racing the writer, and after the writer
// is killed (SIGKILL) at random points. The read helpers and the errors.
#include "common/files.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/child_process.h"
#include "tests/testing/paths.h"

namespace dctrain {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPathVariable = "DCTRAIN_FILES_TEST_PATH";

// Two contents that differ everywhere and in length (a torn write of either
// cannot pass for the other), large enough to take many write() calls' time.
std::string content_a() {
  return std::string(3 << 20, 'a');
}
std::string content_b() {
  std::string b(1 << 20, 'b');
  for (size_t i = 0; i < b.size(); i += 4096) b[i] = '\0';  // bytes, not text
  return b;
}

TEST(Files, WritesAndReadsBackEveryByte) {
  const testing::ScratchDir dir("files-roundtrip");
  const std::string bytes = content_b() + "\r\n\xff";
  write_file_atomically(dir / "f", bytes);
  EXPECT_EQ(read_text_file(dir / "f"), bytes);
  EXPECT_EQ(read_file_if_present(dir / "f"), bytes);
  // Replacing a longer file leaves nothing of it, and no temporary file.
  write_file_atomically(dir / "f", "short");
  EXPECT_EQ(read_text_file(dir / "f"), "short");
  EXPECT_FALSE(std::filesystem::exists(dir / "f.tmp"));
  write_file_atomically(dir / "empty", "");
  EXPECT_EQ(read_text_file(dir / "empty"), "");
  std::filesystem::remove_all(dir);
}

TEST(Files, ErrorsNameTheFileAndWhatToCheck) {
  const testing::ScratchDir dir("files-errors");
  try {
    write_file_atomically(dir / "missing-folder" / "f", "x");
    FAIL() << "wrote into a folder that does not exist";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((dir / "missing-folder" / "f.tmp").string()), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
    EXPECT_NE(what.find("writable?"), std::string::npos) << what;
  }
  EXPECT_FALSE(read_file_if_present(dir / "nothing").has_value());
  try {
    read_text_file(dir / "nothing");
    FAIL() << "read a file that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "cannot read '" + (dir / "nothing").string() + "': does it exist?");
  }
  std::filesystem::remove_all(dir);
}

TEST(Files, AReaderRacingTheWriterSeesTheOldOrTheNewContent) {
  const testing::ScratchDir dir("files-race");
  const auto path = dir / "f";
  const std::string a = content_a(), b = content_b();
  write_file_atomically(path, a);
  std::atomic<bool> done{false};
  std::atomic<size_t> reads{0};
  // After each write the writer waits for two reads to end: the second
  // began after the write had ended, so the reader sees every content at
  // least once however the two threads are scheduled (on a loaded machine
  // the writer once finished all 40 writes while the reader slept, and the
  // reader never saw b). The reads between still race the next write.
  std::thread writer([&] {
    for (int i = 0; i < 40; ++i) {
      write_file_atomically(path, i % 2 == 0 ? b : a);
      const size_t after = reads.load();
      while (reads.load() < after + 2) std::this_thread::yield();
    }
    done = true;
  });
  size_t seen_a = 0, seen_b = 0, torn = 0;
  while (!done) {
    const std::string text = read_text_file(path);
    ++reads;
    if (text == a) {
      ++seen_a;
    } else if (text == b) {
      ++seen_b;
    } else {
      ++torn;
    }
  }
  writer.join();
  EXPECT_EQ(torn, 0u) << "of " << reads.load() << " reads";
  EXPECT_GT(seen_a, 0u);
  EXPECT_GT(seen_b, 0u) << "the reader never saw the writer's content in " << reads.load()
                        << " reads";
  std::filesystem::remove_all(dir);
}

// Run by the next test in a child process: writes the two contents in turn
// to $DCTRAIN_FILES_TEST_PATH until it is killed.
TEST(Files, DISABLED_WriterUntilKilled) {
  const char* path = std::getenv(kPathVariable);
  ASSERT_NE(path, nullptr);
  const std::string a = content_a(), b = content_b();
  for (uint64_t i = 0;; ++i) write_file_atomically(path, i % 2 == 0 ? b : a);
}

TEST(Files, AWriterKilledAtAnyPointLeavesTheOldOrTheNewContent) {
  const testing::ScratchDir dir("files-killed");
  const auto path = dir / "f";
  const std::string a = content_a(), b = content_b();
  write_file_atomically(path, a);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int round = 0; round < 6; ++round) {
    ChildOptions o;
    o.argv = {self, "--gtest_also_run_disabled_tests",
              "--gtest_filter=Files.DISABLED_WriterUntilKilled"};
    o.set_environment = {{kPathVariable, path.string()}};
    o.output = ChildOutput::kFile;
    o.output_file = dir / "writer.log";
    ChildProcess writer(std::move(o));
    // Killed at a different point in its write, rename and sync each round.
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + 37 * round));
    EXPECT_FALSE(writer.poll().has_value())
        << "the writer ended by itself: " << read_file_if_present(dir / "writer.log").value_or("");
    EXPECT_EQ(writer.kill().signal, SIGKILL);
    const std::string text = read_text_file(path);
    EXPECT_TRUE(text == a || text == b)
        << "round " << round << ": " << text.size() << " bytes, neither content";
  }
  std::filesystem::remove_all(dir);
}

TEST(Files, AFailedAtomicWriteLeavesTheOldContentAndNoTemporaryFile) {
  const testing::ScratchDir dir("files-full");
  write_file_atomically(dir / "summary.json", "old");
  set_fault("enospc:write:summary.json");
  try {
    write_file_atomically(dir / "summary.json", std::string(5000, 'n'));
    FAIL() << "the injected ENOSPC was not reported";
  } catch (const FileWriteError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.error(), ENOSPC);
    EXPECT_NE(what.find((dir / "summary.json.tmp").string() + "' failed: No space left on device"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("it needs 5.0 kB; '" + dir.string() + "' has "), std::string::npos) << what;
  }
  EXPECT_EQ(read_text_file(dir / "summary.json"), "old");
  EXPECT_FALSE(std::filesystem::exists(dir / "summary.json.tmp"));
  // Failing before the rename, after the bytes were written and synced.
  set_fault("enospc:rename:summary.json");
  EXPECT_THROW(write_file_atomically(dir / "summary.json", "new"), FileWriteError);
  EXPECT_EQ(read_text_file(dir / "summary.json"), "old");
  EXPECT_FALSE(std::filesystem::exists(dir / "summary.json.tmp"));
  write_file_atomically(dir / "summary.json", "new");  // each fault fires once
  EXPECT_EQ(read_text_file(dir / "summary.json"), "new");
  std::filesystem::remove_all(dir);
}

TEST(Files, AnAppendThatFailsLeavesNoTornRecord) {
  const testing::ScratchDir dir("files-append");
  {
    AppendFile records(dir / "metrics.jsonl", true);
    records.append("{\"step\":0}\n");
    records.sync();
    set_fault("enospc:write:metrics.jsonl:2");
    records.append("{\"step\":1}\n");  // the first time: no fault
    EXPECT_THROW(records.append("{\"step\":2}\n"), FileWriteError);
  }
  EXPECT_EQ(read_text_file(dir / "metrics.jsonl"), "{\"step\":0}\n{\"step\":1}\n");
  {
    AppendFile again(dir / "metrics.jsonl", false);  // appends where it ended
    again.append("{\"step\":2}\n");
  }
  EXPECT_EQ(read_text_file(dir / "metrics.jsonl"), "{\"step\":0}\n{\"step\":1}\n{\"step\":2}\n");
  EXPECT_THROW(set_fault("explode:write:x"), std::invalid_argument);
  EXPECT_THROW(set_fault("kill:write:x:0"), std::invalid_argument);
  std::filesystem::remove_all(dir);
}

TEST(Files, OnARealFullFilesystemTheWriteFailsWholeAndCleansUp) {
  // /dev/full answers every write with ENOSPC, as a full disk does; the
  // atomic writer's temporary file must go even so. (A folder cannot be
  // /dev/full: this checks the append path on the device itself.)
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  AppendFile full("/dev/full", false);
  try {
    full.append("record\n");
    FAIL() << "a write to /dev/full succeeded";
  } catch (const FileWriteError& e) {
    EXPECT_EQ(e.error(), ENOSPC) << e.what();
  }
}

}  // namespace
}  // namespace dctrain
