// Where a test finds what the build made and the data beside the source
// tree, and the scratch folders it works in: one definition for every test
// and fuzz target (the build sets DCTRAIN_BIN_DIR, DCTRAIN_SOURCE_DIR and
// DCTRAIN_SHARED_DATA on the dctrain_testing library).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace dctrain::testing {

// A program of the build (dctrain-coordinator, dctrain-launch, ...).
inline std::string program(std::string_view name) {
  return std::string(DCTRAIN_BIN_DIR) + "/" + std::string(name);
}

inline std::filesystem::path source_dir() {
  return DCTRAIN_SOURCE_DIR;
}
inline std::filesystem::path shared_data() {
  return DCTRAIN_SHARED_DATA;
}

// An empty folder dctrain-NAME-PID under the temp directory, made afresh
// and left for the caller (a run folder a test hands to a program).
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("dctrain-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// An empty folder dctrain-NAME-PID-TEST under the temp directory (TEST: the
// running GoogleTest test's name, if any), made afresh and removed with the
// object, unless the test failed: then it is kept and its path printed.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) : path_(path_for(name)) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    if (test != nullptr && test->result()->Failed()) {
      std::fprintf(stderr, "kept for a look: %s\n", path_.c_str());
      return;
    }
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string string() const { return path_.string(); }
  operator const std::filesystem::path&() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& p) const { return path_ / p; }

 private:
  static std::filesystem::path path_for(const std::string& name) {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string leaf = "dctrain-" + name + "-" + std::to_string(::getpid());
    if (test != nullptr) leaf += std::string("-") + test->name();
    for (char& c : leaf) {
      if (c == '/') c = '_';  // parameterized tests' names hold slashes
    }
    return std::filesystem::temp_directory_path() / leaf;
  }

  std::filesystem::path path_;
};

}  // namespace dctrain::testing
