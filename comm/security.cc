#include "comm/security.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "common/files.h"

namespace dctrain {

namespace fs = std::filesystem;

namespace {

constexpr size_t kZ85KeyLength = 40;
constexpr size_t kKeyBytes = 32;
// Distinct refusals (key, address) logged one by one before summing up.
constexpr size_t kMaxLoggedRefusals = 256;
// Requests of keys not (yet) admitted that a holding handler keeps waiting.
constexpr size_t kMaxHeldRequests = 64;

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Each line that is not blank nor a comment: (line number, its first word,
// the rest trimmed).
struct KeyLine {
  size_t number = 0;
  std::string key;
  std::string comment;
};

std::vector<KeyLine> key_lines(const std::string& text) {
  std::vector<KeyLine> out;
  std::istringstream in(text);
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    const std::string_view t = trim(line);
    if (t.empty() || t.front() == '#') continue;
    const size_t space = t.find_first_of(" \t");
    KeyLine k;
    k.number = number;
    k.key = std::string(t.substr(0, space));
    if (space != std::string_view::npos) k.comment = std::string(trim(t.substr(space)));
    out.push_back(std::move(k));
  }
  return out;
}

std::string public_of(const std::string& secret) {
  std::array<char, kZ85KeyLength + 1> pub{};
  if (zmq_curve_public(pub.data(), secret.c_str()) != 0) {
    throw std::runtime_error(fmt::format(
        "cannot derive a CURVE public key: {} (is libzmq built with CURVE? zmq_has(\"curve\"))",
        zmq_strerror(zmq_errno())));
  }
  return std::string(pub.data());
}

// Writes `text` to a new file `path` with `mode`, created with that mode.
void write_new_file(const fs::path& path, const std::string& text, mode_t mode, bool overwrite) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (overwrite ? O_TRUNC : O_EXCL);
  const int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    throw std::runtime_error(fmt::format(
        "cannot write '{}': {}{}", path.string(), std::strerror(errno),
        errno == EEXIST ? " (pass --force to replace it, or choose another name)" : ""));
  }
  // An existing file keeps its mode through O_TRUNC: set it.
  const bool ok = ::fchmod(fd, mode) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) {
    throw std::runtime_error(
        fmt::format("cannot write '{}': {}", path.string(), std::strerror(error)));
  }
}

}  // namespace

CurveKeyPair generate_curve_keypair() {
  std::array<char, kZ85KeyLength + 1> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    throw std::runtime_error(fmt::format(
        "cannot make a CURVE key pair: {} (this libzmq lacks CURVE: install a libzmq built with "
        "libsodium, as Debian's libzmq5 is)",
        zmq_strerror(zmq_errno())));
  }
  return {std::string(pub.data()), std::string(sec.data())};
}

bool is_z85_key(std::string_view text) {
  if (text.size() != kZ85KeyLength) return false;
  const std::string z(text);
  std::array<uint8_t, kKeyBytes> bytes{};
  return zmq_z85_decode(bytes.data(), z.c_str()) != nullptr;
}

CurveKeyPair load_secret_key(const fs::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) {
    throw std::runtime_error(fmt::format("secret key file '{}': {} (make one with dctrain-keygen)",
                                         file.string(), std::strerror(errno)));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    throw std::runtime_error(fmt::format(
        "secret key file '{}' has mode {:04o}: group or others may read it, so the key may be "
        "known to others; refusing to use it. Run 'chmod 600 {}' (and make a new key pair with "
        "dctrain-keygen if others did read it)",
        file.string(), st.st_mode & 07777, file.string()));
  }
  const std::vector<KeyLine> lines = key_lines(read_text_file(file));
  if (lines.empty() || !is_z85_key(lines.front().key)) {
    // The line itself is not quoted: it may be most of a secret.
    throw std::runtime_error(fmt::format(
        "secret key file '{}' holds no CURVE secret key (expected a line of 40 Z85 characters, "
        "as dctrain-keygen writes in NAME.key)",
        file.string()));
  }
  CurveKeyPair keys;
  keys.secret_key = lines.front().key;
  keys.public_key = public_of(keys.secret_key);
  return keys;
}

std::string load_public_key(const fs::path& file) {
  const std::vector<KeyLine> lines = key_lines(read_text_file(file));
  if (lines.empty() || !is_z85_key(lines.front().key)) {
    throw std::runtime_error(
        fmt::format("public key file '{}' holds no CURVE public key (expected a line starting "
                    "with 40 Z85 characters, as dctrain-keygen writes in NAME.pub)",
                    file.string()));
  }
  return lines.front().key;
}

void write_key_pair(const fs::path& stem, const CurveKeyPair& keys, const std::string& comment,
                    bool overwrite) {
  const fs::path secret = fs::path(stem.string() + ".key");
  const fs::path pub = fs::path(stem.string() + ".pub");
  if (!overwrite) {
    for (const fs::path& p : {secret, pub}) {
      if (fs::exists(p)) {
        throw std::runtime_error(fmt::format(
            "'{}' exists: pass --force to replace it, or choose another name", p.string()));
      }
    }
  }
  write_new_file(
      secret,
      fmt::format("# dctrain CURVE secret key{}: keep it private (mode 0600), never "
                  "copy it off the host that uses it.\n# public key: {}\n{}\n",
                  comment.empty() ? "" : " of " + comment, keys.public_key, keys.secret_key),
      0600, overwrite);
  write_new_file(pub, fmt::format("{}{}{}\n", keys.public_key, comment.empty() ? "" : " ", comment),
                 0644, overwrite);
}

AllowList AllowList::load(const fs::path& source) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(source, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(source, ec)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with(".") || !e.is_regular_file()) continue;
      if (name.ends_with(".key")) {
        throw std::runtime_error(fmt::format(
            "allow-list folder '{}' holds '{}', a secret key: only public keys (NAME.pub) belong "
            "there; move the secret key out",
            source.string(), name));
      }
      files.push_back(e.path());
    }
    if (ec) {
      throw std::runtime_error(
          fmt::format("cannot read the allow-list folder '{}': {}", source.string(), ec.message()));
    }
  } else {
    files.push_back(source);
  }
  AllowList list;
  for (const fs::path& file : files) {
    for (const KeyLine& line : key_lines(read_text_file(file))) {
      if (!is_z85_key(line.key)) {
        throw std::runtime_error(
            fmt::format("allow-list '{}' line {}: '{}' is not a CURVE public key (40 Z85 "
                        "characters, then an optional comment, as in NAME.pub)",
                        file.string(), line.number, line.key.substr(0, 48)));
      }
      list.keys_.emplace(line.key, line.comment);
    }
  }
  if (list.keys_.empty()) {
    throw std::runtime_error(fmt::format(
        "allow-list '{}' holds no public key: nobody could join. Add the workers' NAME.pub files "
        "(dctrain-keygen writes them)",
        source.string()));
  }
  return list;
}

AllowList AllowList::of(const std::set<std::string>& keys) {
  AllowList list;
  for (const std::string& k : keys) list.keys_.emplace(k, "");
  return list;
}

std::string AllowList::comment(const std::string& public_key) const {
  const auto it = keys_.find(public_key);
  return it == keys_.end() ? std::string() : it->second;
}

void secure_socket(zmq::socket_t& socket, SocketRole role, const SocketSecurity& security,
                   const std::string& server_public_key) {
  if (!security.curve) return;
  socket.set(zmq::sockopt::curve_secretkey, security.own.secret_key);
  socket.set(zmq::sockopt::curve_publickey, security.own.public_key);
  if (role == SocketRole::kServer) {
    socket.set(zmq::sockopt::curve_server, 1);
    // Names the ZAP domain so that ZeroMQ always asks the context's handler.
    socket.set(zmq::sockopt::zap_domain, "dctrain");
    return;
  }
  const std::string& server =
      server_public_key.empty() ? security.server_public_key : server_public_key;
  if (!is_z85_key(server)) {
    throw std::invalid_argument(
        "a CURVE client needs its server's public key (40 Z85 characters): pass the server's "
        "NAME.pub");
  }
  socket.set(zmq::sockopt::curve_serverkey, server);
}

std::string authenticated_key(const zmq::message_t& part) {
  // gets() throws when the property is absent (a plain connection).
  const char* value = zmq_msg_gets(part.handle(), "User-Id");
  return value == nullptr ? std::string() : std::string(value);
}

bool is_local_only_endpoint(const std::string& address) {
  if (address.starts_with("ipc://") || address.starts_with("inproc://")) return true;
  if (!address.starts_with("tcp://")) return false;
  std::string host = address.substr(6);
  // A ZeroMQ tcp address may name the interface to bind: "tcp://eth0:5555",
  // and a source: "tcp://SRC;DST"; only the plain forms are judged local.
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos) host.resize(colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

ZapHandler::ZapHandler(zmq::context_t& context, AllowList allowed,
                       std::shared_ptr<spdlog::logger> log, std::chrono::milliseconds hold)
    : allowed_(std::move(allowed)),
      log_(std::move(log)),
      socket_(context, zmq::socket_type::router),
      hold_(hold) {
  socket_.set(zmq::sockopt::linger, 0);
  try {
    socket_.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format(
        "cannot start the authentication handler: inproc://zeromq.zap.01: {} (one ZapHandler "
        "per ZeroMQ context)",
        e.what()));
  }
  thread_ = std::thread([this] { serve(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  thread_.join();
}

void ZapHandler::allow(AllowList allowed) {
  std::lock_guard<std::mutex> lock(allowed_mutex_);
  allowed_ = std::move(allowed);
}

void ZapHandler::reply(Request& request, const std::vector<std::string>& frames) {
  // The envelope back first (routing id, empty delimiter), then the reply.
  for (zmq::message_t& part : request.envelope) {
    (void)socket_.send(part, zmq::send_flags::sndmore);
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    (void)socket_.send(zmq::buffer(frames[i]), flags);  // inproc to ZeroMQ's own session
  }
}

void ZapHandler::serve() {
  while (!stop_) {
    zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
    // A short wait so that the destructor's stop is seen promptly and held
    // requests are looked at again soon after an allow().
    const auto wait = std::chrono::milliseconds(held_.empty() ? 50 : 5);
    if (zmq::poll(&item, 1, wait) > 0) {
      Request request;
      request.arrived = std::chrono::steady_clock::now();
      zmq::message_t part;
      bool more = true;
      bool in_envelope = true;
      while (more && socket_.recv(part, zmq::recv_flags::dontwait)) {
        more = part.more();
        const bool delimiter = part.size() == 0;
        if (in_envelope) {
          request.envelope.push_back(std::move(part));
          in_envelope = !delimiter;
        } else {
          request.frames.push_back(std::move(part));
        }
      }
      // Bounded: a flood of unknown keys is refused at once past it.
      if (const auto frames = answer(request, held_.size() < kMaxHeldRequests)) {
        reply(request, *frames);
      } else {
        held_.push_back(std::move(request));
      }
    }
    // Held requests: admitted since, or refused once their time is up.
    const auto now = std::chrono::steady_clock::now();
    for (auto it = held_.begin(); it != held_.end();) {
      const bool expired = now - it->arrived >= hold_;
      if (const auto frames = answer(*it, !expired)) {
        reply(*it, *frames);
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

std::optional<std::vector<std::string>> ZapHandler::answer(const Request& request, bool may_hold) {
  // Frames: version, request id, domain, address, routing id, mechanism,
  // credentials (CURVE: the client's 32-byte public key).
  const std::vector<zmq::message_t>& frames = request.frames;
  const auto frame = [&](size_t i) {
    return i < frames.size() ? frames[i].to_string() : std::string();
  };
  const std::string request_id = frame(1);
  const std::string address = frame(3);
  const std::string mechanism = frame(5);
  if (frame(0) != "1.0" || frames.size() < 6) {
    log_->warn("authentication: malformed ZAP request ({} frames); refused", frames.size());
    ++refused_;
    return std::vector<std::string>{"1.0", request_id, "500", "malformed request", "", ""};
  }
  std::string key;
  if (mechanism == "CURVE" && frames.size() >= 7 && frames[6].size() == kKeyBytes) {
    std::array<char, kZ85KeyLength + 1> z85{};
    zmq_z85_encode(z85.data(), static_cast<const uint8_t*>(frames[6].data()), kKeyBytes);
    key = z85.data();
  }
  std::unique_lock<std::mutex> lock(allowed_mutex_);
  if (!key.empty() && allowed_.contains(key)) {
    ++admitted_;
    const std::string comment = allowed_.comment(key);
    lock.unlock();
    log_->debug("authentication: admitted key {}{} from {}", key,
                comment.empty() ? "" : " (" + comment + ")", address);
    return std::vector<std::string>{"1.0", request_id, "200", "OK", key, ""};
  }
  if (!key.empty() && may_hold && hold_.count() > 0) return std::nullopt;  // may come
  ++refused_;
  const std::string who = key.empty() ? mechanism + " (no key)" : key;
  if (logged_.size() < kMaxLoggedRefusals) {
    if (logged_.insert(who + " " + address).second) {
      log_->warn(
          "refused a connection from {}: {} is not in the allow-list (add the peer's NAME.pub to "
          "it to admit it); further attempts from this key and address are not logged",
          address,
          key.empty() ? fmt::format("it offers no CURVE key (mechanism {})", mechanism)
                      : fmt::format("its CURVE public key {}", key));
    }
  } else if (!logged_full_) {
    logged_full_ = true;
    log_->warn("authentication: {} distinct peers refused; further refusals are only counted",
               kMaxLoggedRefusals);
  }
  return std::vector<std::string>{"1.0", request_id, "400", "key not in the allow-list", "", ""};
}

}  // namespace dctrain
