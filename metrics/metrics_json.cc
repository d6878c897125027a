#include "metrics/metrics_json.h"

#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>

namespace dctrain {

namespace {

using google::protobuf::Value;
namespace util = google::protobuf::util;

// Sets every google.protobuf.Value field left unset in `message` (and in the
// messages it holds) to null: the printer leaves unset message fields out,
// and a record keeps the same keys whoever filled it.
void fill_nulls(google::protobuf::Message& message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Descriptor* type = message.GetDescriptor();
  const google::protobuf::Reflection* reflection = message.GetReflection();
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (field->is_repeated()) {
      for (int k = 0; k < reflection->FieldSize(message, field); ++k) {
        fill_nulls(*reflection->MutableRepeatedMessage(&message, field, k));
      }
    } else if (field->message_type() == Value::descriptor()) {
      if (!reflection->HasField(message, field)) {
        google::protobuf::Message& value = *reflection->MutableMessage(&message, field);
        value.GetReflection()->SetEnumValue(&value,
                                            Value::descriptor()->FindFieldByName("null_value"),
                                            google::protobuf::NULL_VALUE);
      }
    } else if (reflection->HasField(message, field)) {
      fill_nulls(*reflection->MutableMessage(&message, field));
    }
  }
}

std::string to_json(const google::protobuf::Message& record, bool pretty) {
  std::unique_ptr<google::protobuf::Message> message(record.New());
  message->CopyFrom(record);
  fill_nulls(*message);
  util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;     // the keys run folders have always had
  options.always_print_primitive_fields = true;  // a count of 0 is written, not left out
  options.add_whitespace = pretty;
  std::string text;
  const auto status = util::MessageToJsonString(*message, &text, options);
  if (!status.ok()) {
    throw std::runtime_error("cannot write a " + message->GetDescriptor()->full_name() +
                             " as JSON: " + status.ToString());
  }
  return text;
}

// Parses `json` into `message`; an error message on failure.
std::optional<std::string> from_json(const std::string& json, google::protobuf::Message& message) {
  util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // keys of newer (or older) versions
  const auto status = util::JsonStringToMessage(json, &message, options);
  if (status.ok()) return std::nullopt;
  return status.ToString();
}

template <typename Record>
void parse_into(const std::string& line, const std::string& where, std::vector<Record>& out) {
  Record record;
  if (const auto error = from_json(line, record)) {
    throw std::runtime_error(where + ": not a " + Record::descriptor()->name() +
                             " (proto/metrics.proto): " + *error);
  }
  out.push_back(std::move(record));
}

}  // namespace

std::string metrics_line(const google::protobuf::Message& record) {
  return to_json(record, false) + '\n';
}

std::string summary_text(const v1::RunSummary& summary) {
  return to_json(summary, true);
}

std::string json_text(const google::protobuf::Message& message, bool pretty) {
  std::string text = to_json(message, pretty);
  if (text.empty() || text.back() != '\n') text += '\n';
  return text;
}

void parse_json(const std::string& json, google::protobuf::Message& message,
                const std::string& origin) {
  if (const auto error = from_json(json, message)) {
    throw std::runtime_error(origin + ": not a " + message.GetDescriptor()->name() + ": " + *error);
  }
}

std::optional<v1::RecordHeader> parse_record_header(const std::string& line) {
  v1::RecordHeader header;
  if (from_json(line, header)) return std::nullopt;
  return header;
}

MetricsRecords parse_metrics(std::string_view jsonl, const std::string& origin) {
  MetricsRecords records;
  size_t line_number = 0;
  while (!jsonl.empty()) {
    const size_t end = jsonl.find('\n');
    const bool complete = end != std::string_view::npos;
    const std::string line(jsonl.substr(0, end));
    jsonl.remove_prefix(complete ? end + 1 : jsonl.size());
    ++line_number;
    if (line.empty()) continue;
    const std::string where = origin + ":" + std::to_string(line_number);
    v1::RecordHeader header;
    if (const auto error = from_json(line, header)) {
      if (!complete) break;  // still being written, or cut short by a kill
      throw std::runtime_error(where + ": not a JSON object: " + *error +
                               " (was the file cut short?)");
    }
    const std::string& type = header.type();
    if (type == kStepRecordType) {
      parse_into(line, where, records.steps);
    } else if (type == kEvalRecordType) {
      parse_into(line, where, records.evals);
    } else if (type == kEpochRecordType) {
      parse_into(line, where, records.epochs);
    } else if (type == kTauRecordType) {
      parse_into(line, where, records.taus);
    }
  }
  return records;
}

v1::RunSummary parse_summary(const std::string& json, const std::string& origin) {
  v1::RunSummary summary;
  if (const auto error = from_json(json, summary)) {
    throw std::runtime_error(origin + ": not a run summary: " + *error +
                             " (was the file cut short?)");
  }
  return summary;
}

Value number_or_null(std::optional<double> value) {
  Value v;
  if (value && std::isfinite(*value)) {
    v.set_number_value(*value);
  } else {
    v.set_null_value(google::protobuf::NULL_VALUE);
  }
  return v;
}

std::optional<double> optional_number(const Value& value) {
  if (value.kind_case() != Value::kNumberValue) return std::nullopt;
  return value.number_value();
}

Value tau_value(double seconds) {
  Value v;
  if (std::isinf(seconds)) {
    v.set_string_value("inf");
  } else {
    v.set_number_value(seconds);
  }
  return v;
}

double tau_seconds(const Value& value) {
  if (value.kind_case() == Value::kNumberValue) return value.number_value();
  return std::numeric_limits<double>::infinity();
}

}  // namespace dctrain
