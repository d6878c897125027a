// CURVE keys, the allow-list and the ZAP handler (comm/security.h), over
// real sockets on 127.0.0.1: an allowed key is admitted and its messages
// carry the key; an unknown key is refused, the client is told so, and the
// refusal is logged once however often the client retries; a wiretap sees
// a known string in plain traffic and not in CURVE traffic.
#include "comm/security.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm/envelope.h"
#include "comm/framing.h"
#include "comm/transport.h"
#include "tests/comm/tcp_tap.h"
#include "tests/testing/paths.h"

namespace dctrain {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

struct CapturedLog {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> log = std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
  std::string text() {
    log->flush();
    return out.str();
  }
};

TEST(CurveKeys, KeygenFilesRoundTripAndTheSecretFileIsOwnerOnly) {
  const testing::ScratchDir dir("sec-roundtrip");
  const CurveKeyPair keys = generate_curve_keypair();
  ASSERT_TRUE(is_z85_key(keys.public_key));
  ASSERT_TRUE(is_z85_key(keys.secret_key));
  EXPECT_NE(keys.public_key, keys.secret_key);
  write_key_pair(dir / "w0", keys, "w0", false);
  struct stat st {};
  ASSERT_EQ(::stat((dir / "w0.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const CurveKeyPair loaded = load_secret_key(dir / "w0.key");
  EXPECT_EQ(loaded.secret_key, keys.secret_key);
  EXPECT_EQ(loaded.public_key, keys.public_key);  // derived from the secret
  EXPECT_EQ(load_public_key(dir / "w0.pub"), keys.public_key);
  // No silent overwrite.
  EXPECT_THROW(write_key_pair(dir / "w0", generate_curve_keypair(), "w0", false),
               std::runtime_error);
  EXPECT_EQ(load_secret_key(dir / "w0.key").secret_key, keys.secret_key);
  fs::remove_all(dir);
}

TEST(CurveKeys, ASecretKeyOthersMayReadIsRefusedWithTheFixAndWithoutTheSecret) {
  const testing::ScratchDir dir("sec-mode");
  const CurveKeyPair keys = generate_curve_keypair();
  write_key_pair(dir / "c", keys, "c", false);
  for (const mode_t mode : {0640, 0604, 0660}) {
    ASSERT_EQ(::chmod((dir / "c.key").c_str(), mode), 0);
    try {
      load_secret_key(dir / "c.key");
      ADD_FAILURE() << "mode " << std::oct << mode << " accepted";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("chmod 600"), std::string::npos) << what;
      EXPECT_NE(what.find((dir / "c.key").string()), std::string::npos) << what;
      EXPECT_EQ(what.find(keys.secret_key), std::string::npos) << what;
    }
  }
  ASSERT_EQ(::chmod((dir / "c.key").c_str(), 0400), 0);
  EXPECT_EQ(load_secret_key(dir / "c.key").public_key, keys.public_key);
  // A file that holds something else is refused without quoting it.
  std::ofstream(dir / "bad.key") << "not-a-key-but-perhaps-half-a-secret\n";
  ::chmod((dir / "bad.key").c_str(), 0600);
  try {
    load_secret_key(dir / "bad.key");
    ADD_FAILURE() << "a file without a key was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).find("perhaps-half"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(AllowList, AFileWithCommentsAFolderOfPubFilesAndClearErrors) {
  const testing::ScratchDir dir("sec-allow");
  const CurveKeyPair a = generate_curve_keypair(), b = generate_curve_keypair(),
                     c = generate_curve_keypair();
  std::ofstream(dir / "list") << "# the workers\n\n"
                              << a.public_key << " worker-a on host 1\n"
                              << "  " << b.public_key << "\n";
  const AllowList list = AllowList::load(dir / "list");
  EXPECT_EQ(list.size(), 2u);
  EXPECT_TRUE(list.contains(a.public_key));
  EXPECT_TRUE(list.contains(b.public_key));
  EXPECT_FALSE(list.contains(c.public_key));
  EXPECT_EQ(list.comment(a.public_key), "worker-a on host 1");

  fs::create_directories(dir / "folder");
  write_key_pair(dir / "k", a, "a", false);
  fs::copy_file(dir / "k.pub", dir / "folder" / "a.pub");
  std::ofstream(dir / "folder" / "c.pub") << c.public_key << " c\n";
  std::ofstream(dir / "folder" / ".hidden") << "ignored\n";
  const AllowList folder = AllowList::load(dir / "folder");
  EXPECT_EQ(folder.size(), 2u);
  EXPECT_TRUE(folder.contains(a.public_key));
  EXPECT_TRUE(folder.contains(c.public_key));

  std::ofstream(dir / "broken") << a.public_key << "\nsomething-else\n";
  try {
    AllowList::load(dir / "broken");
    ADD_FAILURE() << "a bad line was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "empty") << "# nobody\n";
  EXPECT_THROW(AllowList::load(dir / "empty"), std::runtime_error);
  fs::copy_file(dir / "k.key", dir / "folder" / "a.key");
  EXPECT_THROW(AllowList::load(dir / "folder"), std::runtime_error);  // a secret key in it
  fs::remove_all(dir);
}

TEST(Endpoints, OnlyLoopbackIpcAndInprocAreLocal) {
  for (const char* local :
       {"tcp://127.0.0.1:5555", "tcp://127.0.0.1:*", "tcp://localhost:1", "tcp://[::1]:5555",
        "ipc:///tmp/x", "inproc://x", "tcp://127.1.2.3:9"}) {
    EXPECT_TRUE(is_local_only_endpoint(local)) << local;
  }
  for (const char* remote : {"tcp://*:5555", "tcp://0.0.0.0:5555", "tcp://10.231.0.10:*",
                             "tcp://eth0:5555", "tcp://[::]:5555", "tcp://example.org:5555"}) {
    EXPECT_FALSE(is_local_only_endpoint(remote)) << remote;
  }
}

Message hello_from(const std::string& name, const std::string& marker) {
  Message m;
  m.envelope = make_envelope(0, name);
  m.envelope.mutable_hello()->set_worker_name(name);
  m.envelope.mutable_hello()->set_software_version(marker);
  return m;
}

// A CURVE server with an allow-list of one key, its ZAP handler and the
// transports the tests connect.
struct SecuredServer {
  explicit SecuredServer(const AllowList& allowed) : zap(context, allowed, captured.log) {
    security.curve = true;
    security.own = server_keys;
    router = std::make_unique<RouterTransport>(context, "tcp://127.0.0.1:*", captured.log,
                                               TransportLimits{}, security);
  }
  uint16_t port() const {
    const std::string e = router->endpoint();
    return static_cast<uint16_t>(std::stoi(e.substr(e.rfind(':') + 1)));
  }
  SocketSecurity client(const CurveKeyPair& keys) const {
    SocketSecurity s;
    s.curve = true;
    s.own = keys;
    s.server_public_key = server_keys.public_key;
    return s;
  }
  CapturedLog captured;
  CurveKeyPair server_keys = generate_curve_keypair();
  SocketSecurity security;
  zmq::context_t context{1};
  ZapHandler zap;
  std::unique_ptr<RouterTransport> router;
};

// The events of `link` until `wanted` or `timeout`.
bool wait_event(DealerTransport& link, ConnectionEvent wanted, std::chrono::seconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    while (const auto e = link.try_event()) {
      if (*e == wanted) return true;
    }
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST(ZapHandler, AdmitsAnAllowedKeyAndTagsItsMessagesWithTheKey) {
  const CurveKeyPair worker = generate_curve_keypair();
  SecuredServer server(AllowList::of({worker.public_key}));
  zmq::context_t client_context(1);
  DealerTransport link(client_context, server.router->endpoint(), "w0", server.captured.log,
                       server.client(worker));
  ASSERT_TRUE(wait_event(link, ConnectionEvent::kConnected, 20s)) << server.captured.text();
  link.send(hello_from("w0", "marker"));
  Received received;
  ASSERT_TRUE(server.router->receive(received, 10000ms)) << server.captured.text();
  EXPECT_EQ(received.peer, "w0");
  EXPECT_EQ(received.key, worker.public_key);
  EXPECT_EQ(server.zap.admitted(), 1u);
  EXPECT_EQ(server.zap.refused(), 0u);
}

TEST(ZapHandler, RefusesAnUnknownKeyTellsTheClientAndLogsItOnceWhateverTheRetries) {
  const CurveKeyPair allowed = generate_curve_keypair(), stranger = generate_curve_keypair();
  SecuredServer server(AllowList::of({allowed.public_key}));
  zmq::context_t client_context(1);
  // The stranger comes back three times (a restarted process, a retrying
  // script): the handler is asked each time and refuses each time.
  for (int attempt = 1; attempt <= 3; ++attempt) {
    DealerTransport link(client_context, server.router->endpoint(), "intruder", server.captured.log,
                         server.client(stranger));
    ASSERT_TRUE(wait_event(link, ConnectionEvent::kAuthRefused, 20s)) << server.captured.text();
    link.send(hello_from("intruder", "marker"));
    Received received;
    EXPECT_FALSE(server.router->receive(received, 200ms)) << "a refused peer got a message in";
    EXPECT_EQ(server.zap.refused(), static_cast<uint64_t>(attempt));
  }
  const std::string log = server.captured.text();
  EXPECT_EQ(count(log, "refused a connection from 127.0.0.1"), 1u) << log;
  EXPECT_EQ(count(log, stranger.public_key), 1u) << log;
  EXPECT_EQ(server.zap.admitted(), 0u);
  // A plain client gets nowhere either: its handshake fails.
  DealerTransport plain(client_context, server.router->endpoint(), "plain", server.captured.log);
  EXPECT_TRUE(wait_event(plain, ConnectionEvent::kHandshakeFailed, 20s));
  plain.send(hello_from("plain", "marker"));
  Received received;
  EXPECT_FALSE(server.router->receive(received, 300ms));
}

// What a wiretap between a DEALER and a ROUTER sees of a message that holds
// `marker`, with and without CURVE.
std::string tapped(bool curve, const std::string& marker) {
  const CurveKeyPair worker = generate_curve_keypair();
  SecuredServer server(AllowList::of({worker.public_key}));
  zmq::context_t plain_context(1);
  std::unique_ptr<RouterTransport> plain_router;
  if (!curve) {
    plain_router =
        std::make_unique<RouterTransport>(plain_context, "tcp://127.0.0.1:*", server.captured.log);
  }
  RouterTransport& router = curve ? *server.router : *plain_router;
  const std::string e = router.endpoint();
  testing::TcpTap tap(static_cast<uint16_t>(std::stoi(e.substr(e.rfind(':') + 1))));
  zmq::context_t client_context(1);
  DealerTransport link(client_context, tap.endpoint(), "w0", server.captured.log,
                       curve ? server.client(worker) : SocketSecurity{});
  if (!wait_event(link, ConnectionEvent::kConnected, 20s)) {
    ADD_FAILURE() << "no connection through the tap";
    return "";
  }
  link.send(hello_from("w0", marker));
  Received received;
  if (!router.receive(received, 10000ms)) {
    ADD_FAILURE() << "the message did not arrive through the tap";
    return "";
  }
  Message m;
  EXPECT_FALSE(decode(std::move(received.parts), m).has_value());
  EXPECT_EQ(m.envelope.hello().software_version(), marker);  // it did cross, intact
  return tap.captured();
}

TEST(Eavesdropper, SeesPlainTextWithoutCurveAndNoneWithIt) {
  const std::string marker = "a-string-only-in-the-message-0123456789";
  const std::string plain = tapped(false, marker);
  EXPECT_NE(plain.find(marker), std::string::npos) << "the tap saw nothing it could read";
  EXPECT_NE(plain.find("w0"), std::string::npos);
  const std::string secured = tapped(true, marker);
  EXPECT_GT(secured.size(), marker.size());
  EXPECT_EQ(secured.find(marker), std::string::npos);
  EXPECT_EQ(secured.find("a-string-only"), std::string::npos);
}

}  // namespace
}  // namespace dctrain
