// Transport security and multi-tenant authentication of clusterkv-server:
// TLS and mutual TLS with certificates made by the openssl CLI at test time
// (skipped with a message when it is missing), the loopback rule, bearer
// tokens, tenant isolation and limits, token reload, and logs that never
// contain a token. Servers run in-process on 127.0.0.1:0, except two tests
// that run the real binaries.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/options.h"
#include "client/rpc_client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "model/kv/policies/registry.h"
#include "server/auth.h"
#include "server/server_runner.h"
#include "server/transport_security.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/model/test_util.h"

namespace ckv::server {
namespace {

namespace fs = std::filesystem;
namespace pb = ::clusterkv::v1;
using client::ChannelSecurity;
using client::RpcClient;

// Distinctive tokens: the log test looks for them.
constexpr char kTokenA[] = "tokA-7f3c9e1d5b";
constexpr char kTokenA2[] = "tokA2-2b8d4f6a0c";
constexpr char kTokenB[] = "tokB-c4e6a8b0d2";
constexpr char kTokenC[] = "tokC-19ab37cd55";
constexpr char kUnknownToken[] = "tokX-deadbeef42";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Host KV: 4 layers x 2 KV heads x 32 dims x K,V x F16 = 1 KiB per token.
std::string ModelPath() {
  RandomModelSpec s;
  s.layers = 4;
  s.dim = 128;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 256;
  s.seed = 11;
  return ckv::testing::RandomModelPath("sec", s);
}

ServerConfig BaseConfig() {
  ServerConfig c;
  c.model_path = ModelPath();
  c.listen_address = "127.0.0.1:0";
  c.metrics_address = "";
  c.threads = 2;
  c.sampling.temperature = 0.0f;
  c.sampling.max_tokens = 4;
  c.limits.max_sessions = 16;
  c.limits.max_prompt_tokens = 1024;
  c.limits.max_session_tokens = 4096;
  return c;
}

// ---- certificates -----------------------------------------------------------

// ca (signs server + client), other_ca (signs rogue_client). EC P-256.
class Certs {
 public:
  static const Certs* Get() {
    static const Certs* certs = new Certs();
    return certs->ok_ ? certs : nullptr;
  }
  std::string Path(const std::string& name) const {
    return (dir_ / name).string();
  }
  std::string Pem(const std::string& name) const {
    return ReadText(Path(name));
  }

 private:
  Certs() : dir_(ckv::testing::TempPath("certs")) {
    if (std::system("openssl version >/dev/null 2>&1") != 0) return;
    fs::create_directories(dir_);
    const std::string key =
        "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::string script = absl::StrCat(
        "set -e; cd '", dir_.string(), "'; ",
        "for ca in ca other_ca; do openssl req -x509 ", key,
        " -keyout $ca.key -out $ca.crt -subj /CN=$ca -days 2; done; ",
        "echo 'subjectAltName=DNS:localhost,IP:127.0.0.1' > server.ext; ",
        "echo 'extendedKeyUsage=clientAuth' > client.ext; ",
        "leaf() { openssl req -new ", key, " -keyout $1.key -out $1.csr ",
        "-subj /CN=$1; openssl x509 -req -in $1.csr -CA $2.crt -CAkey $2.key ",
        "-CAcreateserial -out $1.crt -days 2 -extfile $3; }; ",
        "leaf server ca server.ext; leaf client ca client.ext; ",
        "leaf rogue_client other_ca client.ext");
    ok_ = std::system(absl::StrCat("(", script, ") >/dev/null 2>&1").c_str()) ==
          0;
  }
  fs::path dir_;
  bool ok_ = false;
};

#define REQUIRE_CERTS(certs)                                          \
  const Certs* certs = Certs::Get();                                  \
  if (certs == nullptr) {                                             \
    GTEST_SKIP() << "openssl CLI missing or failed: no certificates"; \
  }

// ---- servers and clients ----------------------------------------------------

std::unique_ptr<ClusterKvServer> StartOrDie(const ServerConfig& c) {
  auto s = ClusterKvServer::Start(c, nullptr);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::unique_ptr<RpcClient> Client(const ClusterKvServer& server,
                                  const ChannelSecurity& security = {}) {
  return RpcClient::Connect(absl::StrCat("127.0.0.1:", server.port()),
                            /*timeout_seconds=*/20, security);
}

ChannelSecurity Tls(const Certs& certs, const std::string& ca = "ca.crt") {
  ChannelSecurity s;
  s.tls = true;
  s.ca_pem = certs.Pem(ca);
  s.server_name = "localhost";
  return s;
}

ChannelSecurity WithToken(const std::string& token) {
  ChannelSecurity s;
  s.token = token;
  return s;
}

absl::Status PrefillText(RpcClient& c, const std::string& id,
                         const std::string& text) {
  std::istringstream in(text);
  client::Utf8ChunkReader reader(in, 4096);
  return c.Prefill(id, reader, std::nullopt, nullptr).status();
}

absl::Status DecodeText(RpcClient& c, const std::string& id) {
  pb::DecodeRequest req;
  req.set_session_id(id);
  req.set_text(" next");
  return c.Decode(req, nullptr).status();
}

// ---- configuration ----------------------------------------------------------

TEST(TransportConfigTest, LoopbackAddresses) {
  for (const char* a : {"127.0.0.1:50051", "127.1.2.3:0", "localhost:1",
                        "[::1]:50051", "::1", "127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a :
       {"0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.5:1",
        "example.com:443", "127.0.0.1.evil:1", "128.0.0.1:1", "[::2]:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

TEST(TransportConfigTest, NonLoopbackNeedsTlsOrInsecure) {
  ServerConfig c;
  EXPECT_TRUE(ValidateTransportSecurity(c).ok());  // default: loopback
  c.listen_address = "0.0.0.0:50051";
  const absl::Status s = ValidateTransportSecurity(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--insecure"), std::string::npos) << s;
  c.insecure = true;
  EXPECT_TRUE(ValidateTransportSecurity(c).ok());
  c.insecure = false;
  c.tls.cert_file = "c.pem";
  c.tls.key_file = "k.pem";
  EXPECT_TRUE(ValidateTransportSecurity(c).ok());
  c.tls.key_file = "";
  EXPECT_FALSE(ValidateTransportSecurity(c).ok());  // cert without key
  c.tls = {};
  c.tls.client_ca_file = "ca.pem";
  c.listen_address = "127.0.0.1:0";
  EXPECT_FALSE(ValidateTransportSecurity(c).ok());  // client CA without TLS
}

TEST(TransportConfigTest, StartRefusesNonLoopbackPlainTcp) {
  ServerConfig c = BaseConfig();
  c.listen_address = "0.0.0.0:0";
  auto s = ClusterKvServer::Start(c, nullptr);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TransportConfigTest, BinaryExitsTwoWithAClearMessage) {
  const std::string log = ckv::testing::TempPath("insecure.log");
  const int rc = std::system(absl::StrCat(CLUSTERKV_SERVER_BIN,
                                          " --model /nonexistent.gguf ",
                                          "--listen 0.0.0.0:0 >", log, " 2>&1")
                                 .c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  EXPECT_NE(ReadText(log).find("refusing plain TCP"), std::string::npos)
      << ReadText(log);
}

// Runs `command` with stdout and stderr into a file; returns that text with
// every run of white space as one space (help texts wrap at any space).
std::string OutputOf(const std::string& command, const char* log_name) {
  const std::string log = ckv::testing::TempPath(log_name);
  const int rc = std::system(absl::StrCat(command, " >", log, " 2>&1").c_str());
  EXPECT_TRUE(WIFEXITED(rc)) << command;
  std::string text;
  for (const char c : ReadText(log)) {
    const bool space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (!space) text.push_back(c);
    if (space && !text.empty() && text.back() != ' ') text.push_back(' ');
  }
  return text;
}

// Both programs' help texts list exactly the served policies (not the
// evaluation-only ones): the server's from the registry, the client's from
// its own list (it cannot include the registry), which must match it.
TEST(BinaryHelpTest, ServerAndClientListEveryServedPolicy) {
  std::vector<std::string> served;
  for (const PolicyInfo& p : RegisteredPolicies()) {
    if (!p.evaluation_only) served.push_back(p.name);
  }
  EXPECT_EQ(std::vector<std::string>(std::begin(client::kPolicyNames),
                                     std::end(client::kPolicyNames)),
            served);
  const std::string listed = absl::StrJoin(served, "|");
  const std::string server_help =
      OutputOf(absl::StrCat(CLUSTERKV_SERVER_BIN, " --helpfull"), "sh.log");
  EXPECT_NE(server_help.find("--policy (default KV policy: " + listed + ");"),
            std::string::npos)
      << server_help;
  const std::string server_usage =
      OutputOf(CLUSTERKV_SERVER_BIN, "su.log");  // no --model: usage
  EXPECT_NE(server_usage.find("[--policy " + listed + "]"), std::string::npos)
      << server_usage;
  const std::string client_help =
      OutputOf(absl::StrCat(CLUSTERKV_CLIENT_BIN, " --helpfull"), "ch.log");
  EXPECT_NE(client_help.find(listed + ");"), std::string::npos) << client_help;
  const std::string client_usage =
      OutputOf(absl::StrCat(CLUSTERKV_CLIENT_BIN, " --help"), "cu.log");
  EXPECT_NE(client_usage.find("--policy " + listed + " "), std::string::npos)
      << client_usage;
}

TEST(TokenFileTest, ParsesLinesAndRejectsBadOnesWithoutEchoingThem) {
  auto map = ParseTokens("# comment\n\n  t1 alice\nt2\tbob  \n");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(map->size(), 2u);
  EXPECT_EQ(map->at("t1"), "alice");
  EXPECT_EQ(map->at("t2"), "bob");
  for (const char* bad : {"secret-1\n", "secret-1 a b\n", "secret-1 a/b\n",
                          "secret-1 a\nsecret-1 b\n"}) {
    auto s = ParseTokens(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.status().message().find("secret-1"), std::string::npos);
  }
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("bearer  abc "), "abc");
  EXPECT_FALSE(BearerToken("Basic abc").has_value());
  EXPECT_FALSE(BearerToken("Bearer ").has_value());
}

// ---- TLS --------------------------------------------------------------------

ServerConfig TlsConfigFor(const Certs& certs, bool mutual) {
  ServerConfig c = BaseConfig();
  c.tls.cert_file = certs.Path("server.crt");
  c.tls.key_file = certs.Path("server.key");
  if (mutual) c.tls.client_ca_file = certs.Path("ca.crt");
  return c;
}

TEST(TlsTest, HandshakeNeedsTheRightCa) {
  REQUIRE_CERTS(certs);
  auto server = StartOrDie(TlsConfigFor(*certs, /*mutual=*/false));
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(Client(*server, Tls(*certs))->GetServerInfo().ok());
  auto wrong = Client(*server, Tls(*certs, "other_ca.crt"))->GetServerInfo();
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnavailable)
      << wrong.status();
  // A plain-TCP client cannot talk to the TLS port.
  EXPECT_FALSE(Client(*server)->GetServerInfo().ok());
  // The certificate names localhost: another expected name fails.
  ChannelSecurity other_name = Tls(*certs);
  other_name.server_name = "not-the-server.example";
  EXPECT_FALSE(Client(*server, other_name)->GetServerInfo().ok());
}

TEST(TlsTest, BadCertificateFileIsAnErrorNamingTheFlag) {
  ServerConfig c = BaseConfig();
  c.tls.cert_file = "/nonexistent/server.crt";
  c.tls.key_file = "/nonexistent/server.key";
  auto s = ClusterKvServer::Start(c, nullptr);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--tls-cert"), std::string::npos);
}

TEST(TlsTest, MutualTlsNeedsAClientCertificateOfTheClientCa) {
  REQUIRE_CERTS(certs);
  auto server = StartOrDie(TlsConfigFor(*certs, /*mutual=*/true));
  ASSERT_NE(server, nullptr);
  ChannelSecurity good = Tls(*certs);
  good.cert_pem = certs->Pem("client.crt");
  good.key_pem = certs->Pem("client.key");
  EXPECT_TRUE(Client(*server, good)->GetServerInfo().ok());
  EXPECT_FALSE(Client(*server, Tls(*certs))->GetServerInfo().ok());
  ChannelSecurity rogue = Tls(*certs);
  rogue.cert_pem = certs->Pem("rogue_client.crt");
  rogue.key_pem = certs->Pem("rogue_client.key");
  EXPECT_FALSE(Client(*server, rogue)->GetServerInfo().ok());
}

// ---- authentication and tenants
// ----------------------------------------------

std::string TokensText() {
  return absl::StrCat("# token tenant\n", kTokenA, " alice\n", kTokenA2,
                      " alice\n", kTokenB, " bob\n");
}

// Captures every spdlog line of the process while alive.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() {
    spdlog::default_logger()->flush();
    return out_.str();
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(BaseConfig()); }
  void Start(ServerConfig c) {
    tokens_path_ = ckv::testing::TempPath("tokens.txt");
    WriteText(tokens_path_, TokensText());
    c.auth_tokens_file = tokens_path_;
    server_.reset();
    server_ = StartOrDie(c);
    ASSERT_NE(server_, nullptr);
    alice_ = Client(*server_, WithToken(kTokenA));
    alice2_ = Client(*server_, WithToken(kTokenA2));
    bob_ = Client(*server_, WithToken(kTokenB));
  }
  std::string Create(RpcClient& c) {
    auto info = c.CreateSession({});
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->session_id() : "";
  }

  std::string tokens_path_;
  std::unique_ptr<ClusterKvServer> server_;
  std::unique_ptr<RpcClient> alice_, alice2_, bob_;
};

TEST_F(AuthTest, MissingOrUnknownTokenIsUnauthenticated) {
  for (auto& c :
       {Client(*server_), Client(*server_, WithToken(kUnknownToken))}) {
    EXPECT_EQ(c->CreateSession({}).status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(c->ListSessions().status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(c->GetServerInfo().status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(c->GetSession("s-x").status().code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(PrefillText(*c, "s-x", "hello").code(),
              absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(DecodeText(*c, "s-x").code(), absl::StatusCode::kUnauthenticated);
    pb::GenerateRequest g;
    g.set_prompt("hello");
    EXPECT_EQ(c->Generate(g, nullptr).status().code(),
              absl::StatusCode::kUnauthenticated);
    // Health stays open.
    auto health = c->HealthCheck("");
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, client::ServingStatus::kServing);
  }
  EXPECT_TRUE(alice_->GetServerInfo().ok());
  pb::GenerateRequest g;
  g.set_prompt("hello");
  EXPECT_TRUE(alice_->Generate(g, nullptr).ok());
}

TEST_F(AuthTest, OtherTenantsSessionIsNotFoundLikeAnUnknownId) {
  const std::string id = Create(*alice_);
  ASSERT_TRUE(PrefillText(*alice_, id, "a document of alice").ok());
  // Alice's second token is the same tenant.
  EXPECT_TRUE(alice2_->GetSession(id).ok());
  auto probe = [&](RpcClient& c) {
    std::vector<absl::Status> out = {
        c.GetSession(id).status(), DecodeText(c, id),
        PrefillText(c, id, "more"), c.ForkSession(id).status(),
        c.CloseSession(id).status()};
    return out;
  };
  const std::vector<absl::Status> as_bob = probe(*bob_);
  EXPECT_TRUE(alice_->GetSession(id).ok());  // bob's Close did nothing
  ASSERT_TRUE(alice_->CloseSession(id).ok());
  const std::vector<absl::Status> unknown = probe(*bob_);
  const std::vector<absl::Status> unknown_alice = probe(*alice_);
  ASSERT_EQ(as_bob.size(), unknown.size());
  for (size_t i = 0; i < as_bob.size(); ++i) {
    EXPECT_EQ(as_bob[i].code(), absl::StatusCode::kNotFound) << i;
    EXPECT_EQ(as_bob[i].message(), unknown[i].message()) << i;
    EXPECT_EQ(as_bob[i].message(), unknown_alice[i].message()) << i;
  }
}

TEST_F(AuthTest, ListAndForksStayWithinATenant) {
  const std::string doc = Create(*alice_);
  ASSERT_TRUE(PrefillText(*alice_, doc, std::string(40, 'a')).ok());
  auto child = alice2_->ForkSession(doc);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_GT(child->memory().host_shared_bytes(), 0);  // shares alice's doc
  const std::string mine = Create(*bob_);
  ASSERT_TRUE(PrefillText(*bob_, mine, std::string(40, 'a')).ok());
  auto alice_list = alice_->ListSessions();
  auto bob_list = bob_->ListSessions();
  ASSERT_TRUE(alice_list.ok() && bob_list.ok());
  ASSERT_EQ(alice_list->sessions_size(), 2);
  for (const auto& s : alice_list->sessions()) {
    EXPECT_TRUE(s.session_id() == doc || s.session_id() == child->session_id());
  }
  ASSERT_EQ(bob_list->sessions_size(), 1);
  EXPECT_EQ(bob_list->sessions(0).session_id(), mine);
  // Same text, but bob's session shares nothing with alice's tree.
  EXPECT_EQ(bob_list->sessions(0).memory().host_shared_bytes(), 0);
  EXPECT_EQ(bob_->ForkSession(doc).status().code(),
            absl::StatusCode::kNotFound);
  auto bob_child = bob_->ForkSession(mine);
  ASSERT_TRUE(bob_child.ok());
  EXPECT_NE(bob_child->parent_session_id(), doc);
  EXPECT_EQ(alice_->ListSessions()->sessions_size(), 2);
}

TEST_F(AuthTest, PerTenantLimitsNameTheLimit) {
  ServerConfig c = BaseConfig();
  c.limits.tenant_max_sessions = 2;
  c.limits.tenant_max_host_kv_bytes = 50 * 1024;  // ~50 tokens
  Start(c);
  const std::string a1 = Create(*alice_);
  const std::string a2 = Create(*alice_);
  auto third = alice_->CreateSession({});
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("tenant_max_sessions"),
            std::string::npos);
  EXPECT_EQ(alice_->ForkSession(a1).status().code(),
            absl::StatusCode::kResourceExhausted);
  const std::string b1 = Create(*bob_);  // bob has his own quota
  const absl::Status big = PrefillText(*alice_, a1, std::string(60, 'a'));
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(big.message().find("tenant_max_host_kv_bytes"), std::string::npos)
      << big;
  ASSERT_TRUE(PrefillText(*alice_, a1, std::string(30, 'a')).ok());
  // 30 more tokens of alice's would exceed her 50; bob's are his own.
  EXPECT_EQ(PrefillText(*alice_, a2, std::string(30, 'a')).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(PrefillText(*bob_, b1, std::string(30, 'a')).ok());
  ASSERT_TRUE(alice_->CloseSession(a1).ok());
  EXPECT_TRUE(PrefillText(*alice_, a2, std::string(30, 'a')).ok());
}

TEST_F(AuthTest, ReloadSwapsTokensAndKeepsThemOnABadFile) {
  WriteText(tokens_path_,
            absl::StrCat(kTokenA, " alice\n", kTokenC, " carol\n"));
  ASSERT_TRUE(server_->ReloadTokens().ok());
  auto carol = Client(*server_, WithToken(kTokenC));
  EXPECT_TRUE(carol->ListSessions().ok());
  EXPECT_EQ(bob_->ListSessions().status().code(),
            absl::StatusCode::kUnauthenticated);
  WriteText(tokens_path_, "one-field-only\n");
  EXPECT_FALSE(server_->ReloadTokens().ok());
  EXPECT_TRUE(carol->ListSessions().ok());  // previous tokens in force
  EXPECT_TRUE(alice_->ListSessions().ok());
}

TEST_F(AuthTest, TokensNeverAppearInTheLog) {
  LogCapture log;
  const std::string id = Create(*alice_);
  ASSERT_TRUE(PrefillText(*alice_, id, "some text").ok());
  EXPECT_TRUE(DecodeText(*alice_, id).ok());
  (void)bob_->GetSession(id);
  (void)Client(*server_, WithToken(kUnknownToken))->ListSessions();
  WriteText(tokens_path_, absl::StrCat(kTokenC, "\n"));  // a bad line
  (void)server_->ReloadTokens();
  server_->Drain(absl::ZeroDuration());
  const std::string text = log.text();
  EXPECT_NE(text.find("tenant=alice"), std::string::npos) << text;
  EXPECT_NE(text.find("UNAUTHENTICATED"), std::string::npos) << text;
  for (const char* t : {kTokenA, kTokenA2, kTokenB, kTokenC, kUnknownToken}) {
    EXPECT_EQ(text.find(t), std::string::npos) << t << " in:\n" << text;
  }
}

// ---- real processes
// -----------------------------------------------------------

// Runs `argv` with stdout and stderr to `log`; returns the pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> args;
    for (const std::string& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f != nullptr) dup2(fileno(stdout), fileno(stderr));
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

// Waits for "listening on HOST:PORT" and "serving" in the log.
int WaitForPort(const std::string& log) {
  for (int i = 0; i < 600; ++i) {
    const std::string text = ReadText(log);
    const size_t at = text.find("listening on 127.0.0.1:");
    if (at != std::string::npos && text.find("serving") != std::string::npos) {
      return std::atoi(text.c_str() + at + 23);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

TEST(ProcessTest, SighupReloadsTokensAndTheLogHasNoToken) {
  const std::string tokens = ckv::testing::TempPath("proc_tokens.txt");
  const std::string log = ckv::testing::TempPath("proc_server.log");
  WriteText(tokens, absl::StrCat(kTokenA, " alice\n"));
  const pid_t pid = Spawn(
      {CLUSTERKV_SERVER_BIN, "--model", ModelPath(), "--listen", "127.0.0.1:0",
       "--metrics-address=", "--threads", "1", "--auth-tokens-file", tokens},
      log);
  const int port = WaitForPort(log);
  ASSERT_GT(port, 0) << ReadText(log);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  auto a = RpcClient::Connect(address, 10, WithToken(kTokenA));
  auto b = RpcClient::Connect(address, 10, WithToken(kTokenB));
  EXPECT_TRUE(a->ListSessions().ok());
  EXPECT_EQ(b->ListSessions().status().code(),
            absl::StatusCode::kUnauthenticated);
  WriteText(tokens, absl::StrCat(kTokenB, " bob\n"));
  ASSERT_EQ(kill(pid, SIGHUP), 0);
  bool reloaded = false;
  for (int i = 0; i < 100 && !reloaded; ++i) {
    reloaded = b->ListSessions().ok();
    if (!reloaded) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(reloaded) << ReadText(log);
  EXPECT_EQ(a->ListSessions().status().code(),
            absl::StatusCode::kUnauthenticated);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string text = ReadText(log);
  EXPECT_NE(text.find("tokens reloaded"), std::string::npos) << text;
  EXPECT_EQ(text.find(kTokenA), std::string::npos) << text;
  EXPECT_EQ(text.find(kTokenB), std::string::npos) << text;
}

// Client-controlled text in a real server's log: a session id or a policy
// carrying a newline and a forged log line, a bidi override (U+202E) and a
// 1 MiB id. Each is INVALID_ARGUMENT with a short message, and the log has
// no forged line, no raw control or bidi character and no huge line.
TEST(ProcessTest, ClientTextCannotForgeOrFloodTheLog) {
  const std::string log = ckv::testing::TempPath("inject_server.log");
  const pid_t pid =
      Spawn({CLUSTERKV_SERVER_BIN, "--model", ModelPath(), "--listen",
             "127.0.0.1:0", "--metrics-address=", "--threads", "1"},
            log);
  const int port = WaitForPort(log);
  ASSERT_GT(port, 0) << ReadText(log);
  auto stub = pb::ClusterKv::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  const std::string forged =
      "\n[2026-01-01 00:00:00.000] [info] rpc=FORGED session=- code=OK";
  const std::string hostile[] = {"x" + forged,
                                 "s-\xe2\x80\xae"
                                 "fdp.exe",
                                 std::string(1 << 20, 'A'), "x\r\x1b[2J"};
  for (const std::string& id : hostile) {
    grpc::ClientContext ctx;
    pb::GetSessionRequest req;
    req.set_session_id(id);
    pb::SessionInfo info;
    const grpc::Status s = stub->GetSession(&ctx, req, &info);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
    EXPECT_LT(s.error_message().size(), 200u);
    grpc::ClientContext dctx;
    pb::DecodeRequest dreq;
    dreq.set_session_id(id);
    pb::DecodeResponse r;
    auto reader = stub->Decode(&dctx, dreq);
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  grpc::ClientContext cctx;
  pb::CreateSessionRequest create;
  create.mutable_kv()->set_policy("x" + forged + "\xe2\x80\xae" +
                                  std::string(5000, 'p'));
  pb::SessionInfo info;
  const grpc::Status s = stub->CreateSession(&cctx, create, &info);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(s.error_message().size(), 300u);
  EXPECT_EQ(s.error_message().find('\n'), std::string::npos);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const std::string text = ReadText(log);
  EXPECT_EQ(text.find("\n[2026-01-01"), std::string::npos) << text;
  EXPECT_NE(text.find("session=x\\x0a[2026-01-01\\x2000:00"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("\xe2\x80\xae"), std::string::npos);
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_NE(text.find("\\u{202E}"), std::string::npos) << text;
  size_t longest = 0, rejected = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    longest = std::max(longest, line.size());
    rejected += line.find("code=INVALID_ARGUMENT") != std::string::npos;
  }
  EXPECT_LT(longest, 1000u);
  EXPECT_EQ(rejected, 2 * std::size(hostile) + 1) << text;
}

// The clusterkv CLI with every security flag against a mutual-TLS server
// with authentication.
TEST(ProcessTest, ClientFlagsForTlsAndTokens) {
  REQUIRE_CERTS(certs);
  ServerConfig c = TlsConfigFor(*certs, /*mutual=*/true);
  const std::string tokens = ckv::testing::TempPath("cli_tokens.txt");
  WriteText(tokens, absl::StrCat(kTokenA, " alice\n"));
  c.auth_tokens_file = tokens;
  auto server = StartOrDie(c);
  ASSERT_NE(server, nullptr);
  const std::string token_file = ckv::testing::TempPath("cli_token");
  WriteText(token_file, absl::StrCat(kTokenA, "\n"));
  const std::string out = ckv::testing::TempPath("cli.out");
  auto run = [&](const std::string& extra) {
    const std::string cmd = absl::StrCat(
        CLUSTERKV_CLIENT_BIN, " --server 127.0.0.1:", server->port(),
        " --timeout 20 --tls-ca ", certs->Path("ca.crt"),
        " --tls-server-name localhost --tls-cert ", certs->Path("client.crt"),
        " --tls-key ", certs->Path("client.key"), " ", extra, " >", out,
        " 2>&1");
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  EXPECT_EQ(run(absl::StrCat("--token-file ", token_file, " session list")), 0)
      << ReadText(out);
  EXPECT_EQ(run(absl::StrCat("--token ", kTokenA, " info")), 0)
      << ReadText(out);
  EXPECT_EQ(run("session list"), 1);
  EXPECT_NE(ReadText(out).find("UNAUTHENTICATED"), std::string::npos)
      << ReadText(out);
  EXPECT_EQ(run(absl::StrCat("--token ", kUnknownToken, " session list")), 1);
  EXPECT_EQ(ReadText(out).find(kUnknownToken), std::string::npos);
}

}  // namespace
}  // namespace ckv::server
