// Reading dataset files: whole-file reads with transparent gzip, and the one
// error type every loader throws, whose message names the file, says what is
// wrong and how to fix it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace dctrain {

// A dataset file is missing, truncated, corrupt or of the wrong format.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The bytes of `path`, inflated when they start with the gzip magic (1f 8b);
// several concatenated gzip members are read as one stream. Throws DataError
// for a missing or unreadable file and for corrupt or truncated gzip data.
std::vector<uint8_t> read_data_file(const std::filesystem::path& path);

// True when the file starts with the gzip magic.
bool is_gzip(const std::vector<uint8_t>& bytes);

}  // namespace dctrain
