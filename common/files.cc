#include "common/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace dctrain {

namespace {

std::string bytes_text(uint64_t bytes) {
  if (bytes < 1000) return fmt::format("{} bytes", bytes);
  if (bytes < 1000 * 1000) return fmt::format("{:.1f} kB", bytes / 1e3);
  if (bytes < 1000ull * 1000 * 1000) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} GB", bytes / 1e9);
}

std::filesystem::path folder_of(const std::filesystem::path& path) {
  return path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
}

std::string describe_write_error(const std::filesystem::path& path, int error,
                                 uint64_t needed_bytes) {
  std::string text = fmt::format("writing '{}' failed: {}", path.string(), std::strerror(error));
  const std::filesystem::path folder = folder_of(path);
  struct statvfs fs {};
  if (::statvfs(folder.c_str(), &fs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    text += fmt::format(" (it needs {}; '{}' has {} free)", bytes_text(needed_bytes),
                        folder.string(), bytes_text(free_bytes));
  }
  if (error == EACCES || error == EROFS || error == EPERM || error == ENOENT) {
    text += "; is the folder there and writable?";
  }
  return text;
}

void sync_folder(const std::filesystem::path& path) {
  const int dir = ::open(folder_of(path).c_str(), O_RDONLY);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

// Writes all of `text` to `fd`: 0, or the errno of the failed write (a
// fault injected at "write" for `path` included).
int write_all(int fd, std::string_view text, const std::filesystem::path& path) {
  if (const int injected = fault_at("write", path)) return injected;
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    written += static_cast<size_t>(n);
  }
  return 0;
}

// One injected fault (DCTRAIN_FAULT, set_fault).
struct Fault {
  bool kill = false;
  std::string point;
  std::string file;
  uint64_t at = 1;
  uint64_t reached = 0;
};

struct Faults {
  std::mutex mutex;
  std::vector<Fault> faults;
};

Fault parse_fault(const std::string& spec) {
  std::vector<std::string> parts;
  std::stringstream in(spec);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  Fault f;
  if (parts.size() < 3 || parts.size() > 4 || (parts[0] != "enospc" && parts[0] != "kill") ||
      (parts[1] != "write" && parts[1] != "written" && parts[1] != "rename" &&
       parts[1] != "renamed" && parts[1] != "synced") ||
      parts[2].empty()) {
    throw std::invalid_argument(fmt::format(
        "DCTRAIN_FAULT '{}': use ACTION:POINT:FILE[:N] with ACTION enospc or kill and POINT "
        "write, written, rename, renamed or synced (common/files.h)",
        spec));
  }
  f.kill = parts[0] == "kill";
  f.point = parts[1];
  f.file = parts[2];
  if (parts.size() == 4) {
    char* end = nullptr;
    f.at = std::strtoull(parts[3].c_str(), &end, 10);
    if (end == parts[3].c_str() || *end != '\0' || f.at == 0) {
      throw std::invalid_argument(
          fmt::format("DCTRAIN_FAULT '{}': N must be a count from 1", spec));
    }
  }
  return f;
}

Faults& faults() {
  static Faults* all = [] {
    auto* f = new Faults;
    if (const char* spec = std::getenv("DCTRAIN_FAULT"); spec != nullptr && *spec != '\0') {
      f->faults.push_back(parse_fault(spec));
    }
    return f;
  }();
  return *all;
}

}  // namespace

FileWriteError::FileWriteError(const std::filesystem::path& path, int error, uint64_t needed_bytes)
    : std::runtime_error(describe_write_error(path, error, needed_bytes)),
      path_(path),
      error_(error) {}

void set_fault(const std::string& spec) {
  Fault f = parse_fault(spec);
  Faults& all = faults();
  const std::lock_guard lock(all.mutex);
  all.faults.push_back(std::move(f));
}

void clear_faults() {
  Faults& all = faults();
  const std::lock_guard lock(all.mutex);
  all.faults.clear();
}

int fault_at(std::string_view point, const std::filesystem::path& file) {
  Faults& all = faults();
  const std::lock_guard lock(all.mutex);
  for (Fault& f : all.faults) {
    if (f.point != point || f.file != file.filename().string()) continue;
    if (++f.reached != f.at) continue;
    if (f.kill) ::raise(SIGKILL);
    return ENOSPC;
  }
  return 0;
}

PendingFile::PendingFile(const std::filesystem::path& path, const std::string& text)
    : path_(path), temp_(path.string() + ".tmp"), bytes_(text.size()) {
  const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw FileWriteError(temp_, errno, bytes_);
  pending_ = true;
  if (const int error = write_all(fd, text, path)) {
    ::close(fd);
    fail(error);
  }
  const int sync_error = ::fsync(fd) == 0 ? 0 : errno;
  const int close_error = ::close(fd) == 0 ? 0 : errno;  // closed whatever fsync said
  if (sync_error != 0 || close_error != 0) fail(sync_error != 0 ? sync_error : close_error);
  if (const int injected = fault_at("written", path)) fail(injected);
}

PendingFile::PendingFile(PendingFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::move(other.temp_)),
      bytes_(other.bytes_),
      pending_(std::exchange(other.pending_, false)) {}

PendingFile::~PendingFile() {
  if (!pending_) return;
  std::error_code ignored;
  std::filesystem::remove(temp_, ignored);
}

void PendingFile::fail(int error) {
  std::error_code ignored;
  std::filesystem::remove(temp_, ignored);
  pending_ = false;
  throw FileWriteError(temp_, error, bytes_);
}

void PendingFile::put_in_place() {
  if (!pending_) throw std::logic_error("PendingFile::put_in_place: nothing pending");
  if (const int injected = fault_at("rename", path_)) fail(injected);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail(errno);
  pending_ = false;
  // The rename itself is durable once the folder is synced.
  sync_folder(path_);
  if (const int injected = fault_at("renamed", path_)) {
    throw FileWriteError(path_, injected, bytes_);
  }
}

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  PendingFile(path, text).put_in_place();
}

AppendFile::AppendFile(const std::filesystem::path& path, bool truncate) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | (truncate ? O_TRUNC : 0), 0644);
  if (fd_ < 0) throw FileWriteError(path, errno, 0);
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append(std::string_view text) {
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  if (const int error = write_all(fd_, text, path_)) {
    // A write cut short leaves part of the record: cut the file back.
    if (before >= 0 && ::ftruncate(fd_, before) != 0) {
      // Nothing more to do: the caller stops at this error anyway, and a
      // reader skips a torn last line.
    }
    throw FileWriteError(path_, error, text.size());
  }
}

void AppendFile::sync() {
  if (::fsync(fd_) != 0) throw FileWriteError(path_, errno, 0);
  if (const int injected = fault_at("synced", path_)) throw FileWriteError(path_, injected, 0);
}

std::optional<std::string> read_file_if_present(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string read_text_file(const std::filesystem::path& path) {
  std::optional<std::string> text = read_file_if_present(path);
  if (!text)
    throw std::runtime_error(fmt::format("cannot read '{}': does it exist?", path.string()));
  return std::move(*text);
}

}  // namespace dctrain
