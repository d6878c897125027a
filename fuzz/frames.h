// How a fuzz input becomes ZeroMQ multipart messages and a conversation, and
// back (the seed generator writes real messages in the same scheme):
//
//   parts   := count:u8 { length:u32le bytes }      (count % 32 parts; a
//              length past the input's end takes what is left)
//   script  := { kind:u8 peer:u8 advance:u16le [parts if a message] }
//
// A script drives a message handler: kind % 4 == 0 a message from peer
// (peer % 4 picks one of four names), 1 a tick, 2 a connection event (event
// peer % 4; the coordinator ticks), 3 a signal (number peer; the coordinator
// is stopped when peer is 255 and ticks otherwise). `advance` moves the fake
// clock first, in milliseconds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

namespace dctrain::fuzz {

// Reads bytes off the front of a fuzz input; past its end everything is 0.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(u8()) << (8 * i);
    return v;
  }
  std::string bytes(uint32_t length) {
    const size_t n = std::min<size_t>(length, size_ - std::min(at_, size_));
    std::string out(reinterpret_cast<const char*>(data_) + at_, n);
    at_ += n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

inline constexpr size_t kMaxParts = 32;

inline std::vector<std::string> read_parts(Reader& in) {
  const size_t count = in.u8() % kMaxParts;
  std::vector<std::string> parts;
  parts.reserve(count);
  for (size_t i = 0; i < count; ++i) parts.push_back(in.bytes(in.u32()));
  return parts;
}

inline std::vector<zmq::message_t> to_messages(const std::vector<std::string>& parts) {
  std::vector<zmq::message_t> out;
  out.reserve(parts.size());
  for (const std::string& p : parts) out.emplace_back(p.data(), p.size());
  return out;
}

inline void put_u8(std::string& out, uint8_t v) {
  out.push_back(static_cast<char>(v));
}
inline void put_u16(std::string& out, uint16_t v) {
  put_u8(out, static_cast<uint8_t>(v));
  put_u8(out, static_cast<uint8_t>(v >> 8));
}
inline void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) put_u8(out, static_cast<uint8_t>(v >> (8 * i)));
}

// Appends `parts` (at most kMaxParts - 1 of them) in the `parts` scheme.
inline void write_parts(std::string& out, const std::vector<zmq::message_t>& parts) {
  put_u8(out, static_cast<uint8_t>(parts.size()));
  for (const zmq::message_t& p : parts) {
    put_u32(out, static_cast<uint32_t>(p.size()));
    out.append(static_cast<const char*>(p.data()), p.size());
  }
}

enum class Kind : uint8_t { kMessage = 0, kTick = 1, kEvent = 2, kCompute = 3 };

struct Action {
  Kind kind = Kind::kTick;
  uint8_t peer = 0;
  double advance = 0.0;  // seconds
  std::vector<std::string> parts;
};

inline Action read_action(Reader& in) {
  Action a;
  a.kind = static_cast<Kind>(in.u8() % 4);
  a.peer = in.u8();
  a.advance = in.u16() / 1000.0;
  if (a.kind == Kind::kMessage) a.parts = read_parts(in);
  return a;
}

// Appends one action; `parts` only for a message.
inline void write_action(std::string& out, Kind kind, uint8_t peer, double advance,
                         const std::vector<zmq::message_t>* parts = nullptr) {
  put_u8(out, static_cast<uint8_t>(kind));
  put_u8(out, peer);
  const double ms = advance * 1000.0 + 0.5;
  put_u16(out, static_cast<uint16_t>(ms > 65535.0 ? 65535.0 : ms));
  if (kind == Kind::kMessage) write_parts(out, *parts);
}

}  // namespace dctrain::fuzz
