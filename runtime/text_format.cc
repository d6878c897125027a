#include "runtime/text_format.h"

#include <fmt/format.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <stdexcept>

namespace dctrain {
namespace {

class ErrorList : public google::protobuf::io::ErrorCollector {
 public:
  explicit ErrorList(std::string origin) : origin_(std::move(origin)) {}
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    add(fmt::format("{}:{}:{}: {}", origin_, line + 1, column + 1, message));
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
    add(fmt::format("{}:{}:{}: warning: {}", origin_, line + 1, column + 1, message));
  }
  const std::string& text() const { return text_; }

 private:
  void add(const std::string& line) { text_ += (text_.empty() ? "" : "\n") + line; }
  std::string origin_;
  std::string text_;
};

}  // namespace

void parse_text_format(const std::string& text, const std::string& origin,
                       google::protobuf::Message& message, const std::string& hint) {
  google::protobuf::TextFormat::Parser parser;
  ErrorList errors(origin);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &message)) {
    throw std::runtime_error(fmt::format("{}\n({})", errors.text(), hint));
  }
}

}  // namespace dctrain
