#include "common/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace dctrain {

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path temp = path.string() + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    throw std::runtime_error(fmt::format("cannot write '{}': {} (is the run folder writable?)",
                                         temp.string(), std::strerror(errno)));
  }
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw std::runtime_error(
          fmt::format("writing '{}' failed: {} (disk full?)", temp.string(), std::strerror(err)));
    }
    written += static_cast<size_t>(n);
  }
  const int sync_error = ::fsync(fd) == 0 ? 0 : errno;
  const int close_error = ::close(fd) == 0 ? 0 : errno;  // closed whatever fsync said
  if (sync_error != 0 || close_error != 0) {
    throw std::runtime_error(
        fmt::format("flushing '{}' failed: {} (disk full?)", temp.string(),
                    std::strerror(sync_error != 0 ? sync_error : close_error)));
  }
  std::filesystem::rename(temp, path);
  // The rename itself is durable once the folder is synced.
  const int dir = ::open(path.parent_path().empty() ? "." : path.parent_path().c_str(), O_RDONLY);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
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
