// What one peer may cost a socket: the largest frame it may send, how many
// messages may queue for it, and how long its connection may stay silent.
// ZeroMQ copies these options into each connection when the connection is
// made, so they are set before bind or connect; changing them later only
// affects later connections.
#pragma once

#include <chrono>
#include <cstdint>

#include "comm/framing.h"

namespace dctrain {

// The largest envelope (header frame) dctrain sends: a plan lists its
// sample ids, a welcome carries the run config; both far below this.
inline constexpr int64_t kMaxHeaderBytes = int64_t{1} << 20;

struct TransportLimits {
  // ZMQ_MAXMSGSIZE: a peer sending a larger frame (ZeroMQ checks each frame
  // of a message, not their sum) is disconnected. -1: no limit.
  int64_t max_frame_bytes = -1;
  // ZMQ_SNDHWM: messages queued for one peer that does not read; beyond,
  // sends to it are dropped. 0: ZeroMQ's default (1000).
  int max_queued_messages = 0;
  // ZMTP heartbeats (ZMQ_HEARTBEAT_IVL / _TIMEOUT): a ping every
  // `heartbeat`, and a connection from which nothing came for
  // `heartbeat_timeout` after one is closed (a half-open connection: a host
  // that vanished). 0: off.
  std::chrono::milliseconds heartbeat{0};
  std::chrono::milliseconds heartbeat_timeout{0};
};

// The largest frame a peer sends for a model of these sizes: a tensor frame
// (at most kMaxFrameBytes; a welcome carries the parameters, the buffers and
// each optimizer state as tensors of those sizes) or a header, plus what
// the wire adds to it: ZMQ_MAXMSGSIZE counts a frame as it arrives, and
// CURVE boxes each frame in a MESSAGE command (33 bytes more).
inline constexpr int64_t kFrameWireOverheadBytes = 256;
inline int64_t max_frame_bytes(uint64_t parameter_count, uint64_t buffer_count) {
  const uint64_t largest = parameter_count > buffer_count ? parameter_count : buffer_count;
  const uint64_t tensor_bytes =
      largest * sizeof(float) < kMaxFrameBytes ? largest * sizeof(float) : kMaxFrameBytes;
  const int64_t payload = static_cast<int64_t>(tensor_bytes) > kMaxHeaderBytes
                              ? static_cast<int64_t>(tensor_bytes)
                              : kMaxHeaderBytes;
  return payload + kFrameWireOverheadBytes;
}

// Messages that may queue for one peer: about `budget_bytes` of updates
// (gradient and statistics), at least 8 (a plan, an update and heartbeats
// of a few steps) and at most ZeroMQ's default 1000.
inline int queued_messages_for(uint64_t parameter_count, uint64_t buffer_count,
                               uint64_t budget_bytes = uint64_t{256} << 20) {
  const uint64_t update_bytes = (parameter_count + buffer_count) * sizeof(float) + 1;
  const uint64_t n = budget_bytes / update_bytes;
  return static_cast<int>(n < 8 ? 8 : (n > 1000 ? 1000 : n));
}

}  // namespace dctrain
