// Who may talk to whom, and privately: ZeroMQ's CURVE (encryption and
// authentication of every connection) and a ZAP handler that admits only the
// public keys of an allow-list. Everything the control plane (comm/
// transport.h) and the data plane (exchange/) need is here, so that every
// socket of the system is secured the same way:
//
//   - a server (the side that binds: the coordinator's ROUTER, a data-plane
//     peer's inbox) holds a key pair, and a ZapHandler runs in its ZeroMQ
//     context with the allow-list of client keys;
//   - a client (the side that connects: a worker's DEALER, a data-plane
//     peer's outboxes) holds its own key pair and the server's public key.
//
// secure_socket() sets a socket's options for its role; it must run before
// the socket binds or connects. With SocketSecurity::curve false it does
// nothing, so one code path serves secured and plain runs.
//
// Keys are Z85 text (40 characters for 32 bytes). A key pair lives in two
// files, like SSH's: NAME.key (the secret key, mode 0600, refused when group
// or others may read it) and NAME.pub (the public key and a comment). An
// allow-list is a file of public keys, one per line, each optionally followed
// by a comment ('#' starts a comment line), or a folder of such files (every
// NAME.pub of the workers copied into it). A public key is public: it is also
// the key's fingerprint in logs, and what the allow-list holds.
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <zmq.hpp>

namespace dctrain {

// A CURVE key pair, each key Z85 text of 40 characters.
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

// A fresh key pair from libzmq (libsodium's random source). Throws when
// this libzmq was built without CURVE.
CurveKeyPair generate_curve_keypair();

// True when `text` is a 40-character Z85 encoding of a 32-byte key.
bool is_z85_key(std::string_view text);

// Reads NAME.key: the first line that is not blank nor a comment is the Z85
// secret key; the public key is derived from it. Refuses (throws, naming the
// file and the chmod that fixes it) a file that group or others may read or
// write, and a file that holds no valid key. The secret never appears in an
// error message.
CurveKeyPair load_secret_key(const std::filesystem::path& file);

// Reads a public key file (NAME.pub): the first key in it.
std::string load_public_key(const std::filesystem::path& file);

// Writes `stem`.key (mode 0600, created so: never readable by others, not
// even for an instant) and `stem`.pub ("KEY COMMENT"). Refuses to overwrite
// either unless `overwrite`.
void write_key_pair(const std::filesystem::path& stem, const CurveKeyPair& keys,
                    const std::string& comment, bool overwrite);

// The public keys a server admits.
class AllowList {
 public:
  // `source`: a file, or a folder whose regular files (hidden ones skipped)
  // are each read as one. Throws on a line that is not a key (file and line
  // named) and on a source that holds no key at all.
  static AllowList load(const std::filesystem::path& source);
  // For tests and throwaway runs: the given keys.
  static AllowList of(const std::set<std::string>& keys);

  bool contains(const std::string& public_key) const { return keys_.contains(public_key); }
  size_t size() const { return keys_.size(); }
  // The comment beside `public_key` in the list (e.g. the worker's name), or "".
  std::string comment(const std::string& public_key) const;

 private:
  std::map<std::string, std::string> keys_;  // Z85 public key -> comment
};

enum class SocketRole {
  kServer,  // binds; authenticates its clients through the context's ZapHandler
  kClient,  // connects; authenticates the server by its public key
};

// How a socket is secured. Built once from the program's key files and
// handed to every place that makes a socket.
struct SocketSecurity {
  bool curve = false;             // false: plain TCP (loopback runs, tests)
  CurveKeyPair own;               // this process's key pair
  std::string server_public_key;  // a client's: the server it connects to
};

// Sets `socket`'s CURVE options for `role` (nothing when !security.curve).
// Call before bind or connect. A client needs security.server_public_key
// unless `server_public_key` names it (a data-plane peer connects to several
// servers, each with its own key); throws std::invalid_argument without one.
void secure_socket(zmq::socket_t& socket, SocketRole role, const SocketSecurity& security,
                   const std::string& server_public_key = "");

// The public key the ZAP handler authenticated for the connection that
// `part` came in on (ZeroMQ's User-Id property), or "" on a plain connection.
std::string authenticated_key(const zmq::message_t& part);

// True when `address` (tcp://HOST:PORT, ipc://, inproc://) can be reached
// only from this host: 127.0.0.0/8, ::1, localhost, ipc and inproc.
// tcp://*:PORT and tcp://0.0.0.0:PORT are not.
bool is_local_only_endpoint(const std::string& address);

// ZeroMQ's authentication handler (ZAP, RFC 27) for one context: a ROUTER
// on inproc://zeromq.zap.01, answered on a thread of its own. It admits a
// CURVE client whose public key is in the allow-list, with the key as the
// connection's User-Id, and refuses every other (NULL and PLAIN included).
// Each refused key is logged once per address, not once per reconnection.
// With `hold` > 0, a CURVE key not (yet) in the list is not refused at once:
// its request waits up to `hold` for an allow() that names it (a data-plane
// peer admits a round's members when its plan arrives, which may be after a
// faster member's first connection; ZeroMQ would not retry a refused
// handshake). Construct it before any server socket of the context binds;
// it stops and joins in its destructor, so declare it after the context it
// serves.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, AllowList allowed, std::shared_ptr<spdlog::logger> log,
             std::chrono::milliseconds hold = std::chrono::milliseconds(0));
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  uint64_t admitted() const { return admitted_.load(); }
  uint64_t refused() const { return refused_.load(); }
  // Replaces the allow-list for connections authenticated from now on (a
  // data-plane peer admits each round's members); connections already
  // admitted stay.
  void allow(AllowList allowed);

 private:
  // A request as received: the ROUTER's envelope (routing id, empty
  // delimiter) and the ZAP frames.
  struct Request {
    std::vector<zmq::message_t> envelope;
    std::vector<zmq::message_t> frames;
    std::chrono::steady_clock::time_point arrived;
  };
  void serve();
  // The reply to one request (ZAP frames), or nothing while it is held.
  std::optional<std::vector<std::string>> answer(const Request& request, bool may_hold);
  void reply(Request& request, const std::vector<std::string>& frames);

  std::mutex allowed_mutex_;  // allow() runs on the owner's thread, answer() on serve()'s
  AllowList allowed_;
  std::shared_ptr<spdlog::logger> log_;
  zmq::socket_t socket_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> admitted_{0};
  std::atomic<uint64_t> refused_{0};
  // Refusals already logged (key and address), bounded: past the bound a
  // flood of fresh keys is summed up, not logged one by one.
  std::set<std::string> logged_;
  bool logged_full_ = false;
  std::chrono::milliseconds hold_;
  std::vector<Request> held_;  // serve()'s only
  std::thread thread_;         // last: starts once everything above exists
};

}  // namespace dctrain
