#include "exchange/sum_sketch.h"

#include <algorithm>
#include <stdexcept>

#include "exchange/plan.h"

namespace dctrain {
namespace {

// SplitMix64's finaliser: every bit of the index and the seed reaches every
// bit of the result.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The hash of index `i`'s group of 4 (see add_range), shifted to its 16 bits.
uint64_t index_bits(uint64_t seed, uint64_t i) {
  return mix(seed + (i / 4) * 0x9e3779b97f4a7c15ULL) >> (16 * (i % 4));
}

// Adds `value` into its bucket: 15 of its 16 bits pick the bucket, one the
// sign (without a branch: a coin toss mispredicts half the time).
inline void add_one(uint64_t bits, float value, uint32_t count, double* buckets) {
  const uint64_t bucket = ((bits & 0x7fff) * count) >> 15;
  const double sign = static_cast<double>(static_cast<int>((bits >> 14) & 2) - 1);
  buckets[bucket] += sign * static_cast<double>(value);
}

// Adds values [begin, end) into `buckets` (`count` of them). One hash of a
// group of 4 consecutive indices gives each of them 16 bits.
void add_range(std::span<const float> values, uint64_t begin, uint64_t end, uint64_t seed,
               uint32_t count, double* buckets) {
  uint64_t i = begin;
  for (; i < end && i % 4 != 0; ++i) add_one(index_bits(seed, i), values[i], count, buckets);
  for (; i + 4 <= end; i += 4) {
    const uint64_t h = mix(seed + (i / 4) * 0x9e3779b97f4a7c15ULL);
    add_one(h, values[i], count, buckets);
    add_one(h >> 16, values[i + 1], count, buckets);
    add_one(h >> 32, values[i + 2], count, buckets);
    add_one(h >> 48, values[i + 3], count, buckets);
  }
  for (; i < end; ++i) add_one(index_bits(seed, i), values[i], count, buckets);
}

}  // namespace

std::vector<double> sketch_shards(std::span<const float> values, const SketchShape& shape) {
  if (values.size() != shape.length || shape.parameters > shape.length || shape.shards == 0 ||
      shape.buckets == 0) {
    throw std::invalid_argument("sketch_shards: the values do not have the sketch's shape");
  }
  std::vector<double> out(shape.size(), 0.0);
  // Only the shard bounds are used: any piece size gives the same.
  const ExchangePlan plan(shape.length, shape.shards, 1);
  // The statistics under another seed, so that their buckets are
  // independent of the gradient's.
  const uint64_t statistics_seed = mix(shape.seed ^ 0x5354415453ULL);
  for (size_t shard = 0; shard < shape.shards; ++shard) {
    const uint64_t begin = plan.shard_begin(shard);
    const uint64_t end = plan.shard_end(shard);
    const uint64_t split = std::clamp(shape.parameters, begin, end);
    add_range(values, begin, split, shape.seed, shape.buckets,
              out.data() + shape.gradient_at(shard));
    add_range(values, split, end, statistics_seed, shape.buckets,
              out.data() + shape.statistics_at(shard));
  }
  return out;
}

double squared_norm(std::span<const double> values, size_t begin, size_t count) {
  double sum = 0.0;
  for (size_t i = begin; i < begin + count; ++i) sum += values[i] * values[i];
  return sum;
}

}  // namespace dctrain
