// Protobuf text format as dctrain reads its files (run configs, sweeps):
// every parse error with file:line:column, then a hint naming the schema.
#pragma once

#include <string>

#include <google/protobuf/message.h>

namespace dctrain {

// Parses `text` into `message`. On failure throws std::runtime_error with one
// "origin:line:column: problem" line per error, followed by "(hint)".
void parse_text_format(const std::string& text, const std::string& origin,
                       google::protobuf::Message& message, const std::string& hint);

}  // namespace dctrain
