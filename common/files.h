// Whole files: written atomically, read in one piece; files written a
// record at a time (AppendFile); and the errors both give when the disk
// says no (FileWriteError), with where to inject such failures and crashes
// in tests (fault_at).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dctrain {

// A write to a file that failed: which file, the errno, and how many bytes
// the write needed against what the file's folder had free then. what()
// says it all in one line, e.g. "writing 'run/checkpoint.bin.tmp' failed:
// No space left on device (it needs 2.1 MB; 'run' has 12.0 kB free)".
class FileWriteError : public std::runtime_error {
 public:
  FileWriteError(const std::filesystem::path& path, int error, uint64_t needed_bytes);
  const std::filesystem::path& path() const { return path_; }
  int error() const { return error_; }

 private:
  std::filesystem::path path_;
  int error_;
};

// An atomic write in two halves, for a caller that must make something else
// durable after the new content is safe and before it is in place (the
// checkpoint waits for the records it covers). The constructor writes
// `text` to `path`.tmp and syncs it; put_in_place() renames it over `path`
// and syncs the folder. Not put in place, the temporary is removed. Both
// throw FileWriteError (the temporary removed).
class PendingFile {
 public:
  PendingFile(const std::filesystem::path& path, const std::string& text);
  ~PendingFile();
  PendingFile(PendingFile&& other) noexcept;
  PendingFile& operator=(PendingFile&&) = delete;
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;

  void put_in_place();
  const std::filesystem::path& path() const { return path_; }

 private:
  [[noreturn]] void fail(int error);  // removes the temporary, throws

  std::filesystem::path path_, temp_;
  uint64_t bytes_ = 0;
  bool pending_ = false;  // the temporary exists and is this object's
};

// Writes `text` to `path` atomically (a PendingFile put in place at once): `path`.tmp is written,
// fsynced and renamed over `path`, then the folder is synced. A reader (or a crash at any point)
// sees the old content or the new, never a mix or a truncated file. On failure `path`.tmp is
// removed and FileWriteError (a std::runtime_error) names the file and the cause.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

// A file written a record at a time (metrics.jsonl): each append() lands
// whole or not at all, and sync() makes what was appended durable.
class AppendFile {
 public:
  // Opens `path` to append to it, or truncated to empty when `truncate`.
  // Throws FileWriteError when it cannot be opened.
  AppendFile(const std::filesystem::path& path, bool truncate);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Appends `text`. When the write fails (a full disk), the file is cut
  // back to its length before, so no torn record stays, and FileWriteError
  // is thrown.
  void append(std::string_view text);
  // fsync: what was appended survives a crash of the machine.
  void sync();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// The whole file, byte for byte; throws naming `path` when it cannot be read.
std::string read_text_file(const std::filesystem::path& path);

// The whole file, or nothing when it cannot be opened (e.g. it does not
// exist yet), for callers with their own message or a default.
std::optional<std::string> read_file_if_present(const std::filesystem::path& path);

// Fault injection for the writes above, so that tests can see what a full
// disk or a crash at a given moment leaves behind (a test cannot always
// mount a small filesystem). Off unless the environment variable
// DCTRAIN_FAULT is set when the process starts, or set_fault() is called:
//
//   DCTRAIN_FAULT=ACTION:POINT:FILE[:N]
//
// ACTION is "enospc" (the operation fails with ENOSPC) or "kill" (the
// process sends itself SIGKILL); FILE a file name (e.g. metrics.jsonl); N
// the time the point is reached for that file, from 1 (default 1). POINT:
//   write    before the first byte of a write (PendingFile: of FILE.tmp;
//            AppendFile: of an append to FILE)
//   written  PendingFile: FILE.tmp written and synced (the constructor's end)
//   rename   PendingFile::put_in_place: before the rename
//   renamed  PendingFile::put_in_place: FILE in place, the folder synced
//   synced   AppendFile: an append to FILE made durable by sync()
// fault_at() is what the writers call at each point: 0, or the errno to
// fail with; for "kill" it does not return.
void set_fault(const std::string& spec);
void clear_faults();
int fault_at(std::string_view point, const std::filesystem::path& file);

}  // namespace dctrain
