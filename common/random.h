// Counter-based randomness: every random choice in dctrain is a pure function
// of a few integers (seed, epoch, sample id, ...), so the same sample processed
// on another worker, or requeued to a later step, draws the same numbers.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace dctrain {

// SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Hashes an ordered list of integers into one 64-bit key.
constexpr uint64_t hash_key(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x243f6a8885a308d3ULL;
  for (uint64_t p : parts) h = mix64(h ^ mix64(p));
  return h;
}

// A small, fast stream generator (SplitMix64 sequence) started from a key.
// Not for cryptography. Copyable: a copy continues the same stream.
class Rng {
 public:
  explicit constexpr Rng(uint64_t key) : state_(key) {}
  Rng(std::initializer_list<uint64_t> parts) : state_(hash_key(parts)) {}

  constexpr uint64_t next_u64() {
    state_ += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 bits: exactly representable as float.
  float uniform_float() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }
  // Uniform in [0, 1) with 53 bits.
  double uniform_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) (Lemire's multiply-shift; bias < n / 2^64).
  uint64_t below(uint64_t n) {
    __extension__ using u128 = unsigned __int128;
    return static_cast<uint64_t>((static_cast<u128>(next_u64()) * n) >> 64);
  }
  // Standard normal (Box-Muller; uses two draws).
  double normal();

 private:
  uint64_t state_;
};

}  // namespace dctrain
