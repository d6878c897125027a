#include "data/io.h"

#include <fmt/core.h>
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <limits>

namespace dctrain {
namespace {

std::vector<uint8_t> read_raw(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw DataError(
        fmt::format("{}: file not found — check the path, or the data root it is "
                    "relative to (--data-dir)",
                    path.string()));
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw DataError(fmt::format("{}: is a directory, expected a file", path.string()));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DataError(
        fmt::format("{}: cannot be opened for reading — check its permissions", path.string()));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff length = in.tellg();
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(static_cast<size_t>(length));
  if (length > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), length)) {
    throw DataError(
        fmt::format("{}: read failed after {} of {} bytes", path.string(), in.gcount(), length));
  }
  return bytes;
}

// Inflates every gzip member in `compressed`.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& compressed,
                            const std::filesystem::path& path) {
  std::vector<uint8_t> out;
  out.reserve(compressed.size() * 4);
  size_t consumed = 0;
  while (consumed < compressed.size()) {
    z_stream stream{};
    // 16 + MAX_WBITS: gzip wrapper only.
    if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
      throw DataError(fmt::format("{}: zlib could not start inflating", path.string()));
    }
    const size_t available = compressed.size() - consumed;
    stream.next_in = const_cast<Bytef*>(compressed.data() + consumed);
    stream.avail_in =
        static_cast<uInt>(std::min<size_t>(available, std::numeric_limits<uInt>::max()));
    int status = Z_OK;
    while (status != Z_STREAM_END) {
      if (out.size() == out.capacity()) out.reserve(out.capacity() * 2 + (1 << 16));
      const size_t before = out.size();
      out.resize(out.capacity());
      stream.next_out = out.data() + before;
      stream.avail_out = static_cast<uInt>(
          std::min<size_t>(out.size() - before, std::numeric_limits<uInt>::max()));
      const uInt avail_before = stream.avail_out;
      status = inflate(&stream, Z_NO_FLUSH);
      out.resize(before + (avail_before - stream.avail_out));
      if (status == Z_STREAM_END) break;
      if (status == Z_BUF_ERROR && stream.avail_in == 0) {
        inflateEnd(&stream);
        throw DataError(fmt::format(
            "{}: gzip data ends early (truncated after {} compressed bytes) — the download or "
            "copy is incomplete; fetch the file again",
            path.string(), compressed.size()));
      }
      if (status != Z_OK && status != Z_BUF_ERROR) {
        const std::string message = stream.msg != nullptr ? stream.msg : "unknown zlib error";
        inflateEnd(&stream);
        throw DataError(
            fmt::format("{}: corrupt gzip data ({}) at compressed byte {} — fetch the "
                        "file again, or store it uncompressed",
                        path.string(), message, consumed + stream.total_in));
      }
    }
    consumed += stream.total_in;
    inflateEnd(&stream);
    // Concatenated members are legal gzip; trailing zero padding is tolerated.
    while (consumed < compressed.size() && compressed[consumed] == 0) ++consumed;
    if (consumed < compressed.size() &&
        (compressed.size() - consumed < 2 || compressed[consumed] != 0x1f ||
         compressed[consumed + 1] != 0x8b)) {
      throw DataError(
          fmt::format("{}: {} bytes of garbage after the gzip data — the file is "
                      "corrupt; fetch it again",
                      path.string(), compressed.size() - consumed));
    }
  }
  out.shrink_to_fit();
  return out;
}

}  // namespace

bool is_gzip(const std::vector<uint8_t>& bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

std::vector<uint8_t> read_data_file(const std::filesystem::path& path) {
  std::vector<uint8_t> bytes = read_raw(path);
  if (is_gzip(bytes)) return gunzip(bytes, path);
  if (path.extension() == ".gz") {
    throw DataError(
        fmt::format("{}: named .gz but does not start with the gzip magic 1f 8b — the "
                    "file is corrupt, or not compressed (then drop the .gz suffix)",
                    path.string()));
  }
  return bytes;
}

}  // namespace dctrain
