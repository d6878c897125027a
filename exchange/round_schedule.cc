#include "exchange/round_schedule.h"

#include <fmt/ranges.h>

#include "exchange/halving_round.h"
#include "exchange/mesh_round.h"

namespace dctrain {

std::optional<std::string> round_mismatch(const ChunkHeader& h, size_t payload_bytes,
                                          std::span<const uint32_t> members, uint64_t digest,
                                          uint64_t length, uint64_t piece_floats, bool halving) {
  if (halving_piece(h.kind) != halving) {
    return halving ? "runs the direct schedule (this peer: halving; same schedule everywhere?)"
                   : "runs the halving schedule (this peer: direct; same schedule everywhere?)";
  }
  if (h.members != members.size() || h.members_digest != digest) {
    return fmt::format("runs this round among {} other members (this peer: {})", h.members,
                       fmt::join(members, ","));
  }
  if (h.length != length || h.piece_floats != piece_floats) {
    return fmt::format(
        "exchanges {} floats in pieces of {} (this peer: {} in pieces of {}; same model and "
        "piece_bytes on every member?)",
        h.length, h.piece_floats, length, piece_floats);
  }
  if (payload_bytes != h.count * sizeof(float)) {
    return fmt::format("piece of {} floats came with {} bytes", h.count, payload_bytes);
  }
  return std::nullopt;
}

std::unique_ptr<RoundSchedule> make_round(ExchangeSchedule schedule, const RoundInputs& in,
                                          PieceSink& sink, ExchangeStats& stats,
                                          std::chrono::steady_clock::time_point start) {
  if (schedule == ExchangeSchedule::kHalving) {
    return std::make_unique<HalvingRound>(in, sink, stats, start);
  }
  return std::make_unique<MeshRound>(in, sink, stats, start);
}

}  // namespace dctrain
