#include "runtime/text_format.h"

#include <fmt/format.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <memory>
#include <optional>
#include <regex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/suggest.h"
#include "proto/config.pb.h"

namespace dctrain {
namespace {

namespace pb = google::protobuf;

std::string field_suggestion(const std::string& message);

class ErrorList : public pb::io::ErrorCollector {
 public:
  explicit ErrorList(std::string origin) : origin_(std::move(origin)) {}
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    add(fmt::format("{}:{}:{}: {}{}", origin_, line + 1, column + 1, message,
                    field_suggestion(message)));
  }
  void AddWarning(int line, pb::io::ColumnNumber column, const std::string& message) override {
    add(fmt::format("{}:{}:{}: warning: {}", origin_, line + 1, column + 1, message));
  }
  const std::string& text() const { return text_; }

 private:
  void add(const std::string& line) { text_ += (text_.empty() ? "" : "\n") + line; }
  std::string origin_;
  std::string text_;
};

// For protobuf's 'Message type "T" has no field named "x".': the fields of
// T nearest to x, as " (did you mean 'y'?)"; else "".
std::string field_suggestion(const std::string& message) {
  static const std::regex unknown(R"re(Message type "([\w.]+)" has no field named "(\w+)")re");
  std::smatch m;
  if (!std::regex_search(message, m, unknown)) return "";
  const pb::Descriptor* type = pb::DescriptorPool::generated_pool()->FindMessageTypeByName(m[1]);
  if (type == nullptr) return "";
  std::vector<std::string> fields;
  for (int i = 0; i < type->field_count(); ++i) fields.push_back(type->field(i)->name());
  return did_you_mean(m[2].str(), fields);
}

// The line and column (from 1) of the first byte of `text` that is not
// part of well-formed UTF-8, or nothing. Protobuf's text parser takes any
// bytes into a string field, but a proto3 string must be UTF-8: such a
// config would fail later, far from its cause.
std::optional<std::pair<size_t, size_t>> first_non_utf8(const std::string& text) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    uint32_t code = 0;
    if (byte < 0x80) {
      length = 1;
      code = byte;
    } else if (byte >= 0xc2 && byte <= 0xdf) {
      length = 2;
      code = byte & 0x1fu;
    } else if (byte >= 0xe0 && byte <= 0xef) {
      length = 3;
      code = byte & 0x0fu;
    } else if (byte >= 0xf0 && byte <= 0xf4) {
      length = 4;
      code = byte & 0x07u;
    } else {
      return std::make_pair(line, column);
    }
    if (i + length > text.size()) return std::make_pair(line, column);
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0u) != 0x80u) return std::make_pair(line, column);
      code = (code << 6) | (next & 0x3fu);
    }
    // Overlong forms, UTF-16 surrogates and values past U+10FFFF.
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < least[length] || (code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) {
      return std::make_pair(line, column);
    }
    if (byte == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += length;
  }
  return std::nullopt;
}

bool has_words(const pb::EnumDescriptor& type) {
  for (int i = 0; i < type.value_count(); ++i) {
    if (type.value(i)->options().HasExtension(v1::word)) return true;
  }
  return false;
}

bool is_worded(const pb::FieldDescriptor& field) {
  return field.type() == pb::FieldDescriptor::TYPE_ENUM && has_words(*field.enum_type());
}

const pb::EnumValueDescriptor* value_of_word(const pb::EnumDescriptor& type,
                                             const std::string& word) {
  for (int i = 0; i < type.value_count(); ++i) {
    const pb::EnumValueDescriptor* value = type.value(i);
    if (value->number() != 0 && value->options().GetExtension(v1::word) == word) return value;
  }
  return nullptr;
}

// The schema a file is read with: the real one, except that every worded
// enum field is a string field of the same number. protoc's text parser then
// takes the quoted words as they stand, with its own positioned errors, and
// everything else reaches the real message through the wire format, which
// the two schemas share.
class WordSchema {
 public:
  explicit WordSchema(const pb::Descriptor& type) {
    add(*type.file());
    const pb::Descriptor* mirrored = pool_.FindMessageTypeByName(type.full_name());
    if (mirrored == nullptr) {
      throw std::logic_error("text format: no word schema for " + type.full_name());
    }
    prototype_ = factory_.GetPrototype(mirrored);
  }
  std::unique_ptr<pb::Message> make() const {
    return std::unique_ptr<pb::Message>(prototype_->New());
  }

 private:
  void add(const pb::FileDescriptor& file) {
    if (pool_.FindFileByName(file.name()) != nullptr) return;
    for (int i = 0; i < file.dependency_count(); ++i) add(*file.dependency(i));
    pb::FileDescriptorProto proto;
    file.CopyTo(&proto);
    for (int i = 0; i < file.message_type_count(); ++i) {
      to_strings(*file.message_type(i), *proto.mutable_message_type(i));
    }
    if (pool_.BuildFile(proto) == nullptr) {
      throw std::logic_error("text format: cannot build the word schema of " + file.name());
    }
  }
  static void to_strings(const pb::Descriptor& type, pb::DescriptorProto& proto) {
    for (int i = 0; i < type.field_count(); ++i) {
      if (!is_worded(*type.field(i))) continue;
      pb::FieldDescriptorProto& field = *proto.mutable_field(i);
      field.set_type(pb::FieldDescriptorProto::TYPE_STRING);
      field.clear_type_name();
      field.clear_default_value();
    }
    for (int i = 0; i < type.nested_type_count(); ++i) {
      to_strings(*type.nested_type(i), *proto.mutable_nested_type(i));
    }
  }

  pb::DescriptorPool pool_;
  pb::DynamicMessageFactory factory_{&pool_};
  const pb::Message* prototype_ = nullptr;
};

struct WordReader {
  const std::string& origin;
  std::vector<std::string> problems;

  // Clears from `words` (word schema) every field that is an enum in `real`'s
  // schema, so that the rest serializes into something `real` parses; set()
  // reads the words from an uncleared copy.
  void clear(pb::Message& words, const pb::Descriptor& real) {
    const pb::Reflection& reflection = *words.GetReflection();
    std::vector<const pb::FieldDescriptor*> fields;
    reflection.ListFields(words, &fields);
    for (const pb::FieldDescriptor* field : fields) {
      const pb::FieldDescriptor* real_field = real.FindFieldByNumber(field->number());
      if (real_field == nullptr) continue;
      if (is_worded(*real_field)) {
        reflection.ClearField(&words, field);
      } else if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE && !field->is_map()) {
        const pb::Descriptor& nested = *real_field->message_type();
        if (field->is_repeated()) {
          for (int i = 0; i < reflection.FieldSize(words, field); ++i) {
            clear(*reflection.MutableRepeatedMessage(&words, field, i), nested);
          }
        } else {
          clear(*reflection.MutableMessage(&words, field), nested);
        }
      }
    }
  }

  // Sets each enum field of `real` from the word in the same field of
  // `words`, recording a positioned problem for every unknown word.
  void set(const pb::Message& words, const pb::TextFormat::ParseInfoTree* where, pb::Message& real,
           const std::string& path) {
    const pb::Reflection& from = *words.GetReflection();
    const pb::Reflection& to = *real.GetReflection();
    std::vector<const pb::FieldDescriptor*> fields;
    from.ListFields(words, &fields);
    for (const pb::FieldDescriptor* field : fields) {
      const pb::FieldDescriptor* real_field =
          real.GetDescriptor()->FindFieldByNumber(field->number());
      if (real_field == nullptr) continue;
      const std::string name = path.empty() ? field->name() : path + "." + field->name();
      const bool repeated = field->is_repeated();
      const int count = repeated ? from.FieldSize(words, field) : 1;
      if (is_worded(*real_field)) {
        for (int i = 0; i < count; ++i) {
          const std::string given =
              repeated ? from.GetRepeatedString(words, field, i) : from.GetString(words, field);
          const pb::EnumValueDescriptor* value =
              given.empty() ? real_field->enum_type()->FindValueByNumber(0)
                            : value_of_word(*real_field->enum_type(), given);
          if (value == nullptr) {
            unknown(where, field, repeated ? i : -1, name, given, *real_field->enum_type());
          } else if (repeated) {
            to.AddEnum(&real, real_field, value);
          } else {
            to.SetEnum(&real, real_field, value);
          }
        }
      } else if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE && !field->is_map()) {
        for (int i = 0; i < count; ++i) {
          const int index = repeated ? i : -1;
          const pb::TextFormat::ParseInfoTree* nested =
              where != nullptr ? where->GetTreeForNested(field, index) : nullptr;
          set(repeated ? from.GetRepeatedMessage(words, field, i) : from.GetMessage(words, field),
              nested,
              repeated ? *to.MutableRepeatedMessage(&real, real_field, i)
                       : *to.MutableMessage(&real, real_field),
              repeated ? fmt::format("{}[{}]", name, i) : name);
        }
      }
    }
  }

  void unknown(const pb::TextFormat::ParseInfoTree* where, const pb::FieldDescriptor* field,
               int index, const std::string& name, const std::string& word,
               const pb::EnumDescriptor& type) {
    std::string at = origin;
    if (where != nullptr) {
      const pb::TextFormat::ParseLocation location = where->GetLocation(field, index);
      if (location.line >= 0) at += fmt::format(":{}:{}", location.line + 1, location.column + 1);
    }
    problems.push_back(
        fmt::format("{}: {} '{}' is not known; use {}", at, name, word, allowed_words(type)));
  }
};

// Prints a worded enum field as its quoted word.
class WordPrinter : public pb::TextFormat::FastFieldValuePrinter {
 public:
  explicit WordPrinter(const pb::EnumDescriptor& type) : type_(type) {}
  void PrintEnum(int32_t value, const std::string& name,
                 pb::TextFormat::BaseTextGenerator* out) const override {
    const pb::EnumValueDescriptor* known = type_.FindValueByNumber(value);
    if (known == nullptr || !known->options().HasExtension(v1::word)) {
      out->PrintString(name);  // a value without a word prints as protoc would
      return;
    }
    // Words are plain lower-case names from proto/config.proto: nothing to escape.
    out->PrintString("\"" + known->options().GetExtension(v1::word) + "\"");
  }

 private:
  const pb::EnumDescriptor& type_;
};

void register_word_printers(const pb::Descriptor& type, pb::TextFormat::Printer& printer,
                            std::vector<const pb::Descriptor*>& seen) {
  for (const pb::Descriptor* s : seen) {
    if (s == &type) return;
  }
  seen.push_back(&type);
  for (int i = 0; i < type.field_count(); ++i) {
    const pb::FieldDescriptor& field = *type.field(i);
    if (is_worded(field)) {
      auto printer_of_field = std::make_unique<WordPrinter>(*field.enum_type());
      if (printer.RegisterFieldValuePrinter(&field, printer_of_field.get())) {
        printer_of_field.release();  // the printer owns it now
      }
    } else if (field.cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      register_word_printers(*field.message_type(), printer, seen);
    }
  }
}

}  // namespace

void parse_text_format(const std::string& text, const std::string& origin, pb::Message& message,
                       const std::string& hint) {
  if (const auto at = first_non_utf8(text)) {
    throw std::runtime_error(fmt::format("{}:{}:{}: not UTF-8 text: save the file as UTF-8\n({})",
                                         origin, at->first, at->second, hint));
  }
  const WordSchema schema(*message.GetDescriptor());
  const std::unique_ptr<pb::Message> words = schema.make();
  pb::TextFormat::Parser parser;
  ErrorList errors(origin);
  parser.RecordErrorsTo(&errors);
  pb::TextFormat::ParseInfoTree where;
  parser.WriteLocationsTo(&where);
  if (!parser.ParseFromString(text, words.get())) {
    throw std::runtime_error(fmt::format("{}\n({})", errors.text(), hint));
  }
  WordReader reader{origin, {}};
  const std::unique_ptr<pb::Message> rest = schema.make();
  rest->CopyFrom(*words);
  reader.clear(*rest, *message.GetDescriptor());
  if (!message.ParseFromString(rest->SerializeAsString())) {
    throw std::logic_error(fmt::format("{}: the word schema of {} does not match it", origin,
                                       message.GetDescriptor()->full_name()));
  }
  reader.set(*words, &where, message, "");
  if (!reader.problems.empty()) {
    std::string all;
    for (const std::string& p : reader.problems) all += p + "\n";
    throw std::runtime_error(fmt::format("{}({})", all, hint));
  }
}

std::string print_text_format(const pb::Message& message) {
  pb::TextFormat::Printer printer;
  std::vector<const pb::Descriptor*> seen;
  register_word_printers(*message.GetDescriptor(), printer, seen);
  std::string text;
  printer.PrintToString(message, &text);
  return text;
}

std::string enum_word(const pb::EnumDescriptor& type, int number) {
  const pb::EnumValueDescriptor* value = type.FindValueByNumber(number);
  if (value == nullptr) return std::to_string(number);
  return value->options().GetExtension(v1::word);
}

std::string allowed_words(const pb::EnumDescriptor& type) {
  std::vector<std::string> words;
  for (int i = 0; i < type.value_count(); ++i) {
    if (type.value(i)->options().HasExtension(v1::word)) {
      words.push_back("'" + type.value(i)->options().GetExtension(v1::word) + "'");
    }
  }
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  }
  return out;
}

}  // namespace dctrain
