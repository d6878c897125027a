// The safetensors format (runtime/safetensors.h): bytes laid out as the
// format says (pinned against a file written out by hand), a round trip
// bit for bit, and every kind of malformed file refused with a message
// naming what is wrong.
#include "runtime/safetensors.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/child_process.h"
#include "tests/testing/paths.h"

namespace dctrain {
namespace {

// A file's bytes from its header text and data, as another writer would
// lay them out (no padding).
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t length = header.size();
  std::memcpy(out.data(), &length, 8);
  return out + header + data;
}

std::string float_bytes(std::initializer_list<float> values) {
  std::string out;
  for (const float v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

// The message decode_safetensors() throws for `bytes`, or "" if it does not.
std::string refusal(const std::string& bytes) {
  try {
    decode_safetensors(bytes, "w.safetensors");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(Safetensors, TheBytesAreTheFormats) {
  SafeTensors file;
  file.metadata["model"] = "mlp";
  file.tensors.push_back({"fc.weight", {2, 1}, {1.0f, -2.0f}});
  file.tensors.push_back({"fc.bias", {1}, {0.5f}});
  const std::string bytes = encode_safetensors(file);

  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  EXPECT_EQ(length % 8, 0u) << "padded so the data is aligned";
  const std::string header = bytes.substr(8, length);
  const std::string expected =
      R"({"__metadata__":{"model":"mlp"},"fc.weight":{"dtype":"F32","shape":[2,1],)"
      R"("data_offsets":[0,8]},"fc.bias":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_EQ(header.substr(0, expected.size()), expected);
  EXPECT_EQ(header.find_first_not_of(' ', expected.size()), std::string::npos) << header;
  EXPECT_EQ(bytes.substr(8 + length), float_bytes({1.0f, -2.0f, 0.5f}));
}

TEST(Safetensors, AFileOfAnotherWriterIsReadInTheOrderOfItsData) {
  // Keys in another order than the data, no padding, spaces in the JSON.
  const std::string header = R"({ "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},)"
                             R"( "a": {"shape": [], "data_offsets": [0, 4], "dtype": "F32"},)"
                             R"( "__metadata__": {"format": "pt"} })";
  const SafeTensors file =
      decode_safetensors(file_bytes(header, float_bytes({7.0f, 1.5f, -0.0f})), "x");
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.tensors[0].name, "a");
  EXPECT_TRUE(file.tensors[0].shape.empty()) << "a scalar";
  EXPECT_EQ(file.tensors[0].values, std::vector<float>{7.0f});
  EXPECT_EQ(file.tensors[1].name, "b");
  EXPECT_EQ(file.tensors[1].shape, std::vector<int64_t>{2});
  EXPECT_TRUE(same_bits(file.tensors[1].values[1], -0.0f));
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.find("b"), &file.tensors[1]);
  EXPECT_EQ(file.find("c"), nullptr);
}

TEST(Safetensors, ARoundTripIsBitExact) {
  SafeTensors file;
  file.metadata["config"] = "name: \"x\"\nstep { tau: inf }\t\\ \x01";
  file.metadata["run"] = "0123abcd";
  std::vector<float> odd = {std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0x7fc00123u),  // a NaN with a payload
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            3.14159274f};
  file.tensors.push_back({"layer1.0.conv1.weight", {1, 2, 3}, odd});
  file.tensors.push_back({"empty", {0, 4}, {}});
  file.tensors.push_back({"scalar", {}, {42.0f}});
  file.tensors.push_back(SafeTensor::int64("bn1.num_batches_tracked", {}, {-(int64_t{1} << 62)}));
  const testing::ScratchDir dir("safetensors");
  write_safetensors(dir / "m.safetensors", file);
  const SafeTensors back = read_safetensors(dir / "m.safetensors");
  EXPECT_EQ(back.metadata, file.metadata);
  ASSERT_EQ(back.tensors.size(), file.tensors.size());
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const SafeTensor &a = file.tensors[i], &b = back.tensors[i];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.shape, a.shape);
    EXPECT_EQ(b.dtype, a.dtype) << a.name;
    EXPECT_EQ(b.integers, a.integers) << a.name;
    ASSERT_EQ(b.values.size(), a.values.size()) << a.name;
    for (size_t k = 0; k < a.values.size(); ++k) {
      EXPECT_TRUE(same_bits(a.values[k], b.values[k])) << a.name << "[" << k << "]";
    }
  }
  EXPECT_EQ(encode_safetensors(back), encode_safetensors(file)) << "the same bytes again";
}

// Python's standard library, as the format's own readers do: the length,
// the JSON, and the floats at the offsets it gives (skipped without python3).
TEST(Safetensors, PythonsStandardLibraryReadsWhatIsWritten) {
  const std::filesystem::path python = "/usr/bin/python3";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << "no " << python;
  SafeTensors file;
  file.metadata["model"] = "resnet20";
  file.tensors.push_back({"conv1.weight", {2, 1, 1, 2}, {0.25f, -1.0f, 2.5f, 1e-3f}});
  file.tensors.push_back({"bn1.running_mean", {3}, {1.0f, 2.0f, 3.0f}});
  const testing::ScratchDir dir("safetensors-python");
  write_safetensors(dir / "m.safetensors", file);
  const char* script = R"(
import json, struct, sys
data = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', data[:8])
header = json.loads(data[8:8 + n])
body = data[8 + n:]
print(header.pop('__metadata__'))
for name, t in sorted(header.items(), key=lambda kv: kv[1]['data_offsets']):
    b, e = t['data_offsets']
    values = struct.unpack('<%df' % ((e - b) // 4), body[b:e])
    print(name, t['dtype'], t['shape'], ' '.join('%.9g' % v for v in values))
)";
  ChildOptions run;
  run.argv = {python.string(), "-c", script, (dir / "m.safetensors").string()};
  const CommandResult result = run_command(run, std::chrono::seconds(60));
  ASSERT_TRUE(result.ok()) << result.output;
  EXPECT_EQ(result.output,
            "{'model': 'resnet20'}\n"
            "conv1.weight F32 [2, 1, 1, 2] 0.25 -1 2.5 0.00100000005\n"
            "bn1.running_mean F32 [3] 1 2 3\n");
}

TEST(Safetensors, WhatCannotBeWrittenIsRefused) {
  SafeTensors twice;
  twice.tensors.push_back({"w", {1}, {1.0f}});
  twice.tensors.push_back({"w", {1}, {2.0f}});
  EXPECT_THROW(encode_safetensors(twice), std::invalid_argument);
  SafeTensors short_values;
  short_values.tensors.push_back({"w", {2, 2}, {1.0f}});
  EXPECT_THROW(encode_safetensors(short_values), std::invalid_argument);
  SafeTensors negative;
  negative.tensors.push_back({"w", {-1}, {}});
  EXPECT_THROW(encode_safetensors(negative), std::invalid_argument);
  SafeTensors reserved;
  reserved.tensors.push_back({"__metadata__", {1}, {1.0f}});
  EXPECT_THROW(encode_safetensors(reserved), std::invalid_argument);
}

TEST(Safetensors, AMalformedFileIsRefusedSayingWhy) {
  const std::string one = float_bytes({1.0f});
  const auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape,
                        const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":" + offsets + "}";
  };
  const std::string ok = file_bytes("{" + entry("w", "F32", "[1]", "[0,4]") + "}", one);
  EXPECT_EQ(refusal(ok), "") << "the well-formed file the cases below spoil";

  struct Case {
    std::string bytes;
    std::string says;
  };
  const Case cases[] = {
      {"abc", "shorter than a safetensors header's length"},
      {ok.substr(0, 20), "header says it is"},
      {file_bytes("[1, 2]", ""), "not a JSON object"},
      {file_bytes("{\"w\": 5}", ""), "tensor 'w' is not a JSON object"},
      {file_bytes("{" + entry("w", "F16", "[2]", "[0,4]") + "}", one),
       "tensor 'w' is of dtype F16"},
      {file_bytes("{" + entry("w", "F32", "[2]", "[0,4]") + "}", one), "needs 2 F32 values"},
      {file_bytes("{" + entry("w", "F32", "[-1]", "[0,4]") + "}", one), "not a whole number"},
      {file_bytes("{" + entry("w", "F32", "[1.5]", "[0,4]") + "}", one), "not a whole number"},
      {file_bytes("{" + entry("w", "F32", "[1]", "[4,0]") + "}", one), "data_offsets [4, 0]"},
      {file_bytes("{" + entry("w", "F32", "[1]", "[0]") + "}", one), "is not [begin, end]"},
      {file_bytes("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", one), "has no \"dtype\""},
      {file_bytes(
           "{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[8,12]") + "}",
           float_bytes({1, 2, 3})),
       "tensor 'b' starts at byte 8 of the data, but the tensors before it end at 4 (a gap)"},
      {file_bytes(
           "{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[1]", "[4,8]") + "}",
           float_bytes({1, 2})),
       "(they overlap)"},
      {file_bytes("{" + entry("w", "F32", "[1]", "[0,4]") + "}", float_bytes({1, 2})),
       "the tensors hold 4 bytes of data, but the file has 8"},
      {file_bytes("{" + entry("w", "F32", "[2]", "[0,8]") + "}", one), "(truncated)"},
      {file_bytes("{\"__metadata__\":{\"n\":3}}", ""), "metadata \"n\" is not a string"},
  };
  for (const Case& c : cases) {
    const std::string why = refusal(c.bytes);
    EXPECT_NE(why.find(c.says), std::string::npos) << "said: '" << why << "'";
    EXPECT_EQ(why.rfind("w.safetensors: ", 0), 0u) << why;
  }
}

}  // namespace
}  // namespace dctrain
