// write_file_atomically leaves the old content or the new, never a mix or a
// truncated file, as a reader racing the writer sees. The read helpers and
// the errors.
#include "common/files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace dctrain {
namespace {

using namespace std::chrono_literals;

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dctrain-files-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

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
  const auto dir = fresh_dir("roundtrip");
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
  const auto dir = fresh_dir("errors");
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
  const auto dir = fresh_dir("race");
  const auto path = dir / "f";
  const std::string a = content_a(), b = content_b();
  write_file_atomically(path, a);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 40; ++i) write_file_atomically(path, i % 2 == 0 ? b : a);
    done = true;
  });
  size_t reads = 0, seen_a = 0, seen_b = 0, torn = 0;
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
  EXPECT_EQ(torn, 0u) << "of " << reads << " reads";
  EXPECT_GT(seen_a, 0u);
  EXPECT_GT(seen_b, 0u) << "the reader never saw the writer's content in " << reads << " reads";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dctrain
