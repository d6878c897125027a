// What a member says about its own contribution after a round, so that the
// coordinator can bound what each member put into the sum, the owner of a
// shard included (coordinator/planes/round_check.h).
//
// The digests (exchange/sum_digest.h) show that every member holds the same
// sum; they cannot show that the sum is the sum of the members' parts. A
// shard's owner that replaces its shard with values of its choosing, the
// same for every member, passes them. What it did is, to everyone else,
// exactly a contribution of (forged shard - the others' parts) from the
// owner. So the coordinator bounds every member's contribution, as the
// star's norm guard does, where the owner's part of its own shard is the
// one it cannot report but only imply: the agreed sum minus what the other
// members say they sent.
//
// The members' reports are linear sketches (count sketches): every float of
// the buffer is added, with a random sign, into one of `buckets` buckets, in
// double; a shard's sketch is its buckets, the gradient's and the
// statistics' apart (the statistics are sums of batch statistics, on
// another scale). A sketch is linear, so the sketch of the sum is the sum of
// the sketches (up to the float rounding of the sum itself), and the squared
// L2 norm of a sketch estimates the squared L2 norm of what it sketches
// (unbiased, relative standard deviation about sqrt(2 / buckets) per
// sketch). The signs and buckets come from a seed the coordinator draws
// after every member has reported the sum it holds, so an owner cannot shape
// its forgery to hide from a sketch it does not yet know.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dctrain {

// The buckets per shard and per part (gradient, statistics) the coordinator
// asks for, and the most a member will compute.
inline constexpr uint32_t kSketchBuckets = 64;
inline constexpr uint32_t kMaxSketchBuckets = 4096;
inline constexpr uint32_t kMaxSketchShards = 1 << 16;

struct SketchShape {
  uint64_t parameters = 0;  // the gradient's floats, first in the buffer
  uint64_t length = 0;      // the buffer: [gradient | statistics]
  size_t shards = 1;        // the round's members (ExchangePlan's shards)
  uint32_t buckets = kSketchBuckets;
  uint64_t seed = 0;

  // Doubles in a whole sketch: for each shard, the gradient's buckets, then
  // the statistics'.
  size_t size() const { return shards * 2 * static_cast<size_t>(buckets); }
  // The doubles of shard `shard`'s gradient part, then its statistics part.
  size_t gradient_at(size_t shard) const { return shard * 2 * static_cast<size_t>(buckets); }
  size_t statistics_at(size_t shard) const { return gradient_at(shard) + buckets; }
};

// The sketch of `values` ([gradient | statistics], shape.length floats).
std::vector<double> sketch_shards(std::span<const float> values, const SketchShape& shape);

// The squared L2 norm of `values`' buckets [begin, begin + count).
double squared_norm(std::span<const double> values, size_t begin, size_t count);

}  // namespace dctrain
