#include "model/param_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

namespace dctrain {
namespace {

TEST(ParamTable, LaysTensorsOutBackToBackWithoutPadding) {
  ParamTable table;
  const size_t w = table.add("conv.weight", {16, 3, 3, 3});
  const size_t b = table.add("conv.bias", {16});
  EXPECT_EQ(table[w].offset, 0u);
  EXPECT_EQ(table[w].count, 432u);
  EXPECT_EQ(table[b].offset, 432u);
  EXPECT_EQ(table[b].count, 16u);
  EXPECT_EQ(table.total(), 448u);
  ASSERT_NE(table.find("conv.bias"), nullptr);
  EXPECT_EQ(table.find("conv.bias")->offset, 432u);
  EXPECT_EQ(table.find("missing"), nullptr);
}

TEST(ParamTable, RejectsDuplicateNamesAndEmptyShapes) {
  ParamTable table;
  table.add("a", {2});
  EXPECT_THROW(table.add("a", {3}), std::invalid_argument);
  EXPECT_THROW(table.add("b", {}), std::invalid_argument);
  EXPECT_THROW(table.add("c", {4, 0}), std::invalid_argument);
}

TEST(Arena, ViewsAliasTheFlatBuffer) {
  ParamTable table;
  table.add("a", {2, 3});
  const size_t b = table.add("b", {4});
  Arena arena(table);
  ASSERT_EQ(arena.flat().size(), 10u);
  auto view = arena.view(b);
  ASSERT_EQ(view.size(), 4u);
  view[0] = 5.0f;
  EXPECT_EQ(arena.flat()[6], 5.0f);
  arena.zero();
  EXPECT_EQ(arena.flat()[6], 0.0f);
}

TEST(Arena, SwappedStorageIsWhatViewsSeeAndTheOldBufferKeepsItsValues) {
  ParamTable table;
  table.add("a", {2, 3});
  const size_t b = table.add("b", {4});
  Arena arena(table);
  arena.view(b)[0] = 5.0f;
  std::vector<float> other(10, 7.0f);
  const float* old_buffer = arena.flat().data();
  arena.swap_storage(other);
  EXPECT_EQ(other.data(), old_buffer) << "traded, not copied";
  EXPECT_EQ(other[6], 5.0f);
  EXPECT_EQ(arena.view(b)[0], 7.0f);
  arena.zero();
  EXPECT_EQ(arena.flat()[6], 0.0f);
  EXPECT_EQ(other[6], 5.0f) << "zeroing the arena leaves the traded buffer alone";
  std::vector<float> wrong(9);
  EXPECT_THROW(arena.swap_storage(wrong), std::invalid_argument);
  EXPECT_EQ(arena.flat().size(), 10u);
}

TEST(Checksum, ChangesWithAnySingleBit) {
  std::vector<float> values(1001);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.001f * static_cast<float>(i);
  const uint64_t base = checksum(values);
  EXPECT_EQ(base, checksum(values));
  // Flip one bit in the body (lanes) and one in the tail (the last float).
  for (size_t index : {size_t{3}, size_t{500}, values.size() - 1}) {
    std::vector<float> copy = values;
    uint32_t bits;
    std::memcpy(&bits, &copy[index], 4);
    bits ^= 1u;
    std::memcpy(&copy[index], &bits, 4);
    EXPECT_NE(checksum(copy), base) << "bit flip at " << index;
  }
}

}  // namespace
}  // namespace dctrain
