// Whole files: written atomically, read in one piece.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace dctrain {

// Writes `text` to `path` atomically: `path`.tmp is written, fsynced and
// renamed over `path`, then the folder is synced. A reader (or a crash at
// any point) sees the old content or the new, never a mix or a truncated
// file. Throws naming the file and what to check when it cannot be written.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

// The whole file, byte for byte; throws naming `path` when it cannot be read.
std::string read_text_file(const std::filesystem::path& path);

// The whole file, or nothing when it cannot be opened (e.g. it does not
// exist yet), for callers with their own message or a default.
std::optional<std::string> read_file_if_present(const std::filesystem::path& path);

}  // namespace dctrain
