// Protobuf text format as dctrain reads and writes its files (run configs,
// sweeps): every parse error with file:line:column, then a hint naming the
// schema. Enum fields whose values carry a (dctrain.v1.word) option (the
// kinds of proto/config.proto) are read from and printed as those quoted
// words (`kind: "dropcompute"`), not as the enum value names.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/generated_enum_reflection.h>
#include <google/protobuf/message.h>

#include <string>

namespace dctrain {

// Parses `text` into `message`. On failure throws std::runtime_error with one
// "origin:line:column: problem" line per error, followed by "(hint)". An
// unknown word names the field, the word and the words allowed there; the
// empty word "" leaves the field unset.
void parse_text_format(const std::string& text, const std::string& origin,
                       google::protobuf::Message& message, const std::string& hint);

// The text format of `message`, words in place of enum value names.
std::string print_text_format(const google::protobuf::Message& message);

// The word of value `number` of `type`: "" for the unset value 0, the number
// itself for a value the enum does not have.
std::string enum_word(const google::protobuf::EnumDescriptor& type, int number);

// The words of `type`, quoted, for messages: "'sgd' or 'adamw'",
// "'none', 'constant', 'exponential', 'dropcompute' or 'bimodal'".
std::string allowed_words(const google::protobuf::EnumDescriptor& type);

// word(v1::MODEL_BERT_TINY) == "bert-tiny": what configs, logs, metrics and
// summaries write for a kind.
template <typename Enum>
std::string word(Enum value) {
  return enum_word(*google::protobuf::GetEnumDescriptor<Enum>(), static_cast<int>(value));
}

}  // namespace dctrain
