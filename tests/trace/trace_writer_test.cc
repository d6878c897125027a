// trace.json's writer: every kind of event parses back with its fields, odd
// names are escaped, non-finite numbers become null, and the file on disk
// is a whole JSON document after every flush, whatever was written before.
#include "trace/trace_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "common/files.h"
#include "tests/testing/paths.h"
#include "tests/trace/trace_json.h"

namespace dctrain {
namespace {

using testing::parse_trace;
using testing::ParsedTrace;

ParsedTrace read_back(const std::filesystem::path& path) {
  std::string problem;
  const std::optional<ParsedTrace> trace =
      parse_trace(read_file_if_present(path).value_or(""), &problem);
  EXPECT_TRUE(trace.has_value()) << problem << "\n" << read_file_if_present(path).value_or("");
  return trace.value_or(ParsedTrace{});
}

TEST(TraceWriter, EveryEventKindParsesBackWithItsFields) {
  const testing::ScratchDir dir("trace-writer-kinds");
  TraceWriter writer(dir / "trace.json");
  EXPECT_TRUE(read_back(dir / "trace.json").events.empty()) << "a new file is a whole document";
  writer.process_name(0, "coordinator", 0);
  writer.thread_name(3, 1, "compute");
  writer.complete(3, 1, "micro-batch", 1500.25, 80.5,
                  {{"micro_batch", 17.0}, {"delay_seconds", 0.03}});
  writer.instant(3, 1, "tau", 2000.0, {{"tau", 0.04}});
  writer.counter(0, "clock offset", 10.0, {{"offset_us", -4.5}});
  writer.set_other_data("{\"workers\":[1,2]}");
  writer.flush();
  const ParsedTrace t = read_back(dir / "trace.json");
  ASSERT_EQ(t.events.size(), 6u);
  EXPECT_EQ(writer.events(), 6u);
  EXPECT_EQ(t.events[0].ph, "M");
  EXPECT_EQ(t.events[0].name, "process_name");
  EXPECT_EQ(t.events[0].strings.at("name"), "coordinator");
  EXPECT_EQ(t.events[1].name, "process_sort_index");
  EXPECT_EQ(t.events[1].number("sort_index"), 0.0);
  EXPECT_EQ(t.events[2].name, "thread_name");
  EXPECT_EQ(t.events[2].pid, 3);
  EXPECT_EQ(t.events[2].tid, 1);
  const auto& mb = t.events[3];
  EXPECT_EQ(mb.ph, "X");
  EXPECT_EQ(mb.name, "micro-batch");
  EXPECT_EQ(mb.ts, 1500.25);
  EXPECT_EQ(mb.dur, 80.5);
  EXPECT_EQ(mb.number("micro_batch"), 17.0);
  EXPECT_EQ(mb.number("delay_seconds"), 0.03);
  EXPECT_EQ(t.events[4].ph, "i");
  EXPECT_EQ(t.events[4].ts, 2000.0);
  EXPECT_EQ(t.events[5].ph, "C");
  EXPECT_EQ(t.events[5].number("offset_us"), -4.5);
  ASSERT_EQ(t.other_data.fields().count("workers"), 1u);
  EXPECT_EQ(t.other_data.fields().at("workers").list_value().values_size(), 2);
  std::filesystem::remove_all(dir);
}

TEST(TraceWriter, NamesAreEscapedAndNonFiniteNumbersAreNull) {
  const testing::ScratchDir dir("trace-writer-escape");
  TraceWriter writer(dir / "trace.json");
  const std::string odd = "a \"quoted\" back\\slash\nnew line\ttab \x01 bell \xc3\xa9";
  writer.process_name(1, odd, 1);
  writer.complete(1, 1, odd, 1.0, 2.0, {{odd, odd}, {"inf", INFINITY}, {"nan", std::nan("")}});
  writer.complete(1, 1, "negative", 3.0, -5.0);
  writer.flush();
  const ParsedTrace t = read_back(dir / "trace.json");
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.events[0].strings.at("name"), odd);
  EXPECT_EQ(t.events[2].name, odd);
  EXPECT_EQ(t.events[2].strings.at(odd), odd);
  EXPECT_TRUE(t.events[2].nulls.at("inf"));
  EXPECT_TRUE(t.events[2].nulls.at("nan"));
  EXPECT_EQ(t.events[3].dur, 0.0) << "a slice never runs backwards";
  std::filesystem::remove_all(dir);
}

TEST(TraceWriter, TheFileIsWholeAfterEveryFlushAndAShorterTailLeavesNothingBehind) {
  const testing::ScratchDir dir("trace-writer-flushes");
  const auto path = dir / "trace.json";
  TraceWriter writer(path);
  writer.set_other_data("{\"note\":\"" + std::string(500, 'x') + "\"}");
  size_t written = 0;
  for (int flush = 0; flush < 20; ++flush) {
    for (int i = 0; i < flush; ++i) {
      writer.complete(flush, 1, "e", flush * 100.0 + i, 1.0, {{"i", static_cast<double>(i)}});
      ++written;
    }
    // The closing part shrinks and grows between flushes.
    writer.set_other_data(flush % 2 == 0 ? "{}" : "{\"n\":" + std::to_string(flush) + "}");
    writer.flush();
    const ParsedTrace t = read_back(path);
    ASSERT_EQ(t.events.size(), written) << "after flush " << flush;
    if (!t.events.empty()) {
      EXPECT_EQ(t.events.back().ts, flush * 100.0 + flush - 1);
    }
  }
  // Events given but not flushed are not on disk, and the file still parses.
  writer.complete(0, 1, "unflushed", 1.0, 1.0);
  EXPECT_EQ(read_back(path).events.size(), written);
  std::filesystem::remove_all(dir);
}

TEST(TraceWriter, AFolderThatCannotBeWrittenIsNamed) {
  const testing::ScratchDir dir("trace-writer-missing");
  try {
    TraceWriter writer(dir / "no-such-folder" / "trace.json");
    FAIL() << "wrote into a folder that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-folder/trace.json"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dctrain
