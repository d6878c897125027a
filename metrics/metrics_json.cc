#include "metrics/metrics_json.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

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

// The compact JSON of a record, written straight from its fields: what
// to_json(record, false) gives, byte for byte, without the tree of nodes
// protobuf's printer builds and frees for every field (a step record of
// 1,024 workers took most of the coordinator's step in the simulator).
// Its order is the printer's: every field but the google.protobuf.Value
// ones in declaration order, then the Values (unset ones as null) by field
// number, as the printer appends them. Messages with a field of another
// kind (64-bit integers, floats, bytes, maps, other message fields), and
// strings with a byte outside printable ASCII, are left to the printer
// (nullopt).
class CompactJson {
 public:
  static std::optional<std::string> write(const google::protobuf::Message& message) {
    CompactJson writer;
    if (!supported(message.GetDescriptor())) return std::nullopt;
    if (!writer.message(message)) return std::nullopt;
    return std::move(writer.out_);
  }

 private:
  using Field = google::protobuf::FieldDescriptor;

  static bool is_value(const Field* field) {
    return field->cpp_type() == Field::CPPTYPE_MESSAGE &&
           field->message_type() == Value::descriptor();
  }

  // Whether every field of `type` (and of the messages it repeats) is of a
  // kind written here; cached per type.
  static bool supported(const google::protobuf::Descriptor* type) {
    static std::mutex mutex;
    static std::map<const google::protobuf::Descriptor*, bool> known;
    {
      const std::lock_guard lock(mutex);
      if (const auto it = known.find(type); it != known.end()) return it->second;
    }
    bool ok = true;
    for (int i = 0; i < type->field_count() && ok; ++i) {
      const Field* f = type->field(i);
      switch (f->cpp_type()) {
        case Field::CPPTYPE_DOUBLE:
        case Field::CPPTYPE_INT32:
        case Field::CPPTYPE_UINT32:
        case Field::CPPTYPE_BOOL:
        case Field::CPPTYPE_ENUM:
          break;
        case Field::CPPTYPE_STRING:
          ok = f->type() == Field::TYPE_STRING;
          break;
        case Field::CPPTYPE_MESSAGE:
          ok = f->is_map() ? false
               : f->is_repeated()
                   ? f->message_type() != Value::descriptor() && supported(f->message_type())
                   : is_value(f);
          break;
        default:
          ok = false;
      }
    }
    const std::lock_guard lock(mutex);
    known[type] = ok;
    return ok;
  }

  bool message(const google::protobuf::Message& m) {
    const google::protobuf::Descriptor* type = m.GetDescriptor();
    const google::protobuf::Reflection* r = m.GetReflection();
    out_ += '{';
    bool first = true;
    const auto key = [&](const Field* f) {
      if (!first) out_ += ',';
      first = false;
      out_ += '"';
      out_ += f->name();
      out_ += "\":";
    };
    std::vector<const Field*> values;
    for (int i = 0; i < type->field_count(); ++i) {
      const Field* f = type->field(i);
      if (is_value(f)) {
        values.push_back(f);
        continue;
      }
      key(f);
      if (!f->is_repeated()) {
        if (!scalar(m, r, f, -1)) return false;
        continue;
      }
      out_ += '[';
      const int n = r->FieldSize(m, f);
      for (int k = 0; k < n; ++k) {
        if (k > 0) out_ += ',';
        const bool ok = f->cpp_type() == Field::CPPTYPE_MESSAGE
                            ? message(r->GetRepeatedMessage(m, f, k))
                            : scalar(m, r, f, k);
        if (!ok) return false;
      }
      out_ += ']';
    }
    std::sort(values.begin(), values.end(),
              [](const Field* a, const Field* b) { return a->number() < b->number(); });
    for (const Field* f : values) {
      key(f);
      if (!value(r->HasField(m, f) ? static_cast<const Value&>(r->GetMessage(m, f))
                                   : Value::default_instance(),
                 r->HasField(m, f)))
        return false;
    }
    out_ += '}';
    return true;
  }

  // Element `index` of a repeated field, or the singular field (-1).
  bool scalar(const google::protobuf::Message& m, const google::protobuf::Reflection* r,
              const Field* f, int index) {
    const bool one = index < 0;
    switch (f->cpp_type()) {
      case Field::CPPTYPE_DOUBLE:
        number(one ? r->GetDouble(m, f) : r->GetRepeatedDouble(m, f, index), true);
        return true;
      case Field::CPPTYPE_INT32:
        out_ += std::to_string(one ? r->GetInt32(m, f) : r->GetRepeatedInt32(m, f, index));
        return true;
      case Field::CPPTYPE_UINT32:
        out_ += std::to_string(one ? r->GetUInt32(m, f) : r->GetRepeatedUInt32(m, f, index));
        return true;
      case Field::CPPTYPE_BOOL:
        out_ += (one ? r->GetBool(m, f) : r->GetRepeatedBool(m, f, index)) ? "true" : "false";
        return true;
      case Field::CPPTYPE_ENUM: {
        const google::protobuf::EnumValueDescriptor* e =
            one ? r->GetEnum(m, f) : r->GetRepeatedEnum(m, f, index);
        out_ += '"';
        out_ += e->name();
        out_ += '"';
        return true;
      }
      case Field::CPPTYPE_STRING: {
        std::string scratch;
        return string(one ? r->GetStringReference(m, f, &scratch)
                          : r->GetRepeatedStringReference(m, f, index, &scratch));
      }
      default:
        return false;
    }
  }

  // A Value as the printer writes it: null, a number, a string or a bool;
  // unset (`set` false) after fill_nulls is null.
  bool value(const Value& v, bool set) {
    if (!set) {
      out_ += "null";
      return true;
    }
    switch (v.kind_case()) {
      case Value::kNullValue:
        out_ += "null";
        return true;
      case Value::kNumberValue:
        if (!std::isfinite(v.number_value())) return false;  // the printer refuses those
        number(v.number_value(), false);
        return true;
      case Value::kStringValue:
        return string(v.string_value());
      case Value::kBoolValue:
        out_ += v.bool_value() ? "true" : "false";
        return true;
      default:
        return false;
    }
  }

  // protobuf's SimpleDtoa: 15 significant digits when they read back as
  // the same double, else 17; a double field's NaN and infinities as the
  // strings the JSON mapping gives them.
  void number(double x, bool quote_special) {
    if (!std::isfinite(x) && quote_special) {
      out_ += std::isnan(x) ? "\"NaN\"" : x > 0 ? "\"Infinity\"" : "\"-Infinity\"";
      return;
    }
    // std::to_chars with a precision is printf's %.*g in the C locale.
    char buffer[32];
    char* end =
        std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::general, 15).ptr;
    double back = 0.0;
    std::from_chars(buffer, end, back);
    if (back != x) {
      end = std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::general, 17).ptr;
    }
    out_.append(buffer, end);
  }

  // The printer's escapes for printable ASCII and control characters;
  // anything else is left to it.
  bool string(const std::string& text) {
    out_ += '"';
    for (const char c : text) {
      const auto u = static_cast<unsigned char>(c);
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\b':
          out_ += "\\b";
          break;
        case '\f':
          out_ += "\\f";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        case '<':
          out_ += "\\u003c";
          break;
        case '>':
          out_ += "\\u003e";
          break;
        default:
          if (u >= 0x80) return false;
          if (u < 0x20 || u == 0x7f) {
            char buffer[8];
            std::snprintf(buffer, sizeof buffer, "\\u%04x", u);
            out_ += buffer;
          } else {
            out_ += c;
          }
      }
    }
    out_ += '"';
    return true;
  }

  std::string out_;
};

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
  if (std::optional<std::string> line = CompactJson::write(record)) return *line + '\n';
  return to_json(record, false) + '\n';
}

std::string printer_metrics_line(const google::protobuf::Message& record) {
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
