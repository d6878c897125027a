#include "exchange/chunk.h"

#include <fmt/format.h>

#include <cstring>

namespace dctrain {

namespace {

// Field offsets of the fixed layout (little-endian, no padding surprises:
// every field is written and read through memcpy).
constexpr size_t kMagicAt = 0;         // u32
constexpr size_t kVersionAt = 4;       // u16
constexpr size_t kKindAt = 6;          // u8
constexpr size_t kStageAt = 7;         // u8 (zero on the direct schedule's pieces)
constexpr size_t kFromAt = 8;          // u32
constexpr size_t kMembersAt = 12;      // u32
constexpr size_t kDigestAt = 16;       // u64
constexpr size_t kStepAt = 24;         // u64
constexpr size_t kAttemptAt = 32;      // u32
constexpr size_t kPieceFloatsAt = 36;  // u32
constexpr size_t kLengthAt = 40;       // u64
constexpr size_t kOffsetAt = 48;       // u64
constexpr size_t kCountAt = 56;        // u64
constexpr size_t kSamplesAt = 64;      // u64
constexpr size_t kRunAt = 72;          // u64
static_assert(kRunAt + sizeof(uint64_t) == kChunkHeaderBytes);

template <typename T>
void put(std::array<std::byte, kChunkHeaderBytes>& out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof value);
}

template <typename T>
T get(std::span<const std::byte> in, size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof value);
  return value;
}

}  // namespace

std::array<std::byte, kChunkHeaderBytes> encode_header(const ChunkHeader& header) {
  std::array<std::byte, kChunkHeaderBytes> out{};
  put(out, kMagicAt, kChunkMagic);
  put(out, kVersionAt, kChunkVersion);
  put(out, kKindAt, static_cast<uint8_t>(header.kind));
  put(out, kStageAt, header.stage);
  put(out, kFromAt, header.from);
  put(out, kMembersAt, header.members);
  put(out, kDigestAt, header.members_digest);
  put(out, kStepAt, header.round.step);
  put(out, kAttemptAt, header.round.attempt);
  put(out, kPieceFloatsAt, header.piece_floats);
  put(out, kLengthAt, header.length);
  put(out, kOffsetAt, header.offset);
  put(out, kCountAt, header.count);
  put(out, kSamplesAt, header.samples);
  put(out, kRunAt, header.round.run);
  return out;
}

std::optional<ChunkHeader> parse_header(std::span<const std::byte> bytes, std::string& why) {
  if (bytes.size() != kChunkHeaderBytes) {
    why = fmt::format("header of {} bytes, expected {}", bytes.size(), kChunkHeaderBytes);
    return std::nullopt;
  }
  if (get<uint32_t>(bytes, kMagicAt) != kChunkMagic) {
    why = "not a data-plane piece (bad magic)";
    return std::nullopt;
  }
  if (const auto version = get<uint16_t>(bytes, kVersionAt); version != kChunkVersion) {
    why =
        fmt::format("data-plane version {}, this peer speaks {} (run the same release everywhere)",
                    version, kChunkVersion);
    return std::nullopt;
  }
  ChunkHeader h;
  const auto kind = get<uint8_t>(bytes, kKindAt);
  if (kind < static_cast<uint8_t>(PieceKind::kContribution) ||
      kind > static_cast<uint8_t>(PieceKind::kHalvingGather)) {
    why = fmt::format("unknown piece kind {}", kind);
    return std::nullopt;
  }
  h.kind = static_cast<PieceKind>(kind);
  h.stage = get<uint8_t>(bytes, kStageAt);
  if (h.stage != 0 && !halving_piece(h.kind)) {
    why = fmt::format("a direct piece (kind {}) with stage {}", kind, h.stage);
    return std::nullopt;
  }
  h.from = get<uint32_t>(bytes, kFromAt);
  h.members = get<uint32_t>(bytes, kMembersAt);
  h.members_digest = get<uint64_t>(bytes, kDigestAt);
  h.round.step = get<uint64_t>(bytes, kStepAt);
  h.round.attempt = get<uint32_t>(bytes, kAttemptAt);
  h.piece_floats = get<uint32_t>(bytes, kPieceFloatsAt);
  h.length = get<uint64_t>(bytes, kLengthAt);
  h.offset = get<uint64_t>(bytes, kOffsetAt);
  h.count = get<uint64_t>(bytes, kCountAt);
  h.samples = get<uint64_t>(bytes, kSamplesAt);
  h.round.run = get<uint64_t>(bytes, kRunAt);
  if (h.offset > h.length || h.count > h.length - h.offset) {
    why = fmt::format("piece [{}, +{}) lies outside a buffer of {} floats", h.offset, h.count,
                      h.length);
    return std::nullopt;
  }
  return h;
}

uint64_t members_digest(std::span<const uint32_t> members) {
  // FNV-1a over the count and every rank's four bytes.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      h ^= (v >> (8 * i)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  };
  mix(static_cast<uint32_t>(members.size()));
  for (uint32_t m : members) mix(m);
  return h;
}

}  // namespace dctrain
