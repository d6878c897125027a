// trace.json read back for the tests: parsed by Protobuf's JSON parser into
// a google.protobuf.Struct (any JSON document), then into plain events.
#pragma once

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dctrain::testing {

struct ParsedEvent {
  std::string ph, name;
  int pid = -1, tid = -1;
  double ts = 0.0, dur = 0.0;
  std::map<std::string, double> numbers;       // numeric args
  std::map<std::string, std::string> strings;  // string args
  std::map<std::string, bool> nulls;           // args written as null
  double number(const std::string& key) const {
    const auto it = numbers.find(key);
    return it == numbers.end() ? -1.0 : it->second;
  }
};

struct ParsedTrace {
  std::vector<ParsedEvent> events;
  google::protobuf::Struct other_data;
};

// The document in `text`, or nothing (with the parser's message in
// `problem`) when it is not valid JSON of the trace-event shape.
inline std::optional<ParsedTrace> parse_trace(const std::string& text, std::string* problem) {
  google::protobuf::Struct doc;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &doc);
  if (!status.ok()) {
    *problem = std::string(status.message());
    return std::nullopt;
  }
  const auto events = doc.fields().find("traceEvents");
  if (events == doc.fields().end() || !events->second.has_list_value()) {
    *problem = "no traceEvents list";
    return std::nullopt;
  }
  ParsedTrace out;
  if (const auto other = doc.fields().find("otherData"); other != doc.fields().end()) {
    out.other_data = other->second.struct_value();
  }
  for (const google::protobuf::Value& v : events->second.list_value().values()) {
    const auto& f = v.struct_value().fields();
    ParsedEvent e;
    auto str = [&](const char* key) {
      const auto it = f.find(key);
      return it == f.end() ? std::string() : it->second.string_value();
    };
    auto num = [&](const char* key) {
      const auto it = f.find(key);
      return it == f.end() ? 0.0 : it->second.number_value();
    };
    e.ph = str("ph");
    e.name = str("name");
    e.pid = static_cast<int>(num("pid"));
    e.tid = static_cast<int>(num("tid"));
    e.ts = num("ts");
    e.dur = num("dur");
    if (const auto args = f.find("args"); args != f.end()) {
      for (const auto& [key, value] : args->second.struct_value().fields()) {
        if (value.has_number_value()) e.numbers[key] = value.number_value();
        if (value.has_string_value()) e.strings[key] = value.string_value();
        if (value.has_null_value()) e.nulls[key] = true;
      }
    }
    out.events.push_back(std::move(e));
  }
  return out;
}

}  // namespace dctrain::testing
