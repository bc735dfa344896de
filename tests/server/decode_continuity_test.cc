// Every streamed token is in the session when a Decode call returns, over
// the wire, for every selection policy and both GQA selection modes: greedy
// Decode(N) equals Decode(a) + Decode(N - a), DecodeSummary.session_tokens
// and GetSession's tokens are the tokens before + input + generated, and
// the same holds across ForkSession, a cancelled call (restored) and
// SnapshotSession + a server restart.
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server_runner.h"
#include "tests/model/test_util.h"
#include "tests/server/small_server_config.h"

namespace ckv::server {
namespace {

namespace v1 = ::clusterkv::v1;
namespace fs = std::filesystem;
using ::grpc::ClientContext;

constexpr int kN = 24;  // tokens of the reference call
constexpr char kDoc[] =
    "Clustered keys recall what matters: a long document is prefilled once, "
    "forks answer questions, and snapshots keep sessions across restarts. "
    "The quick brown fox jumps over the lazy dog, again and again and again. "
    "Segments close, clusters form, and the tail keeps the recent tokens.";
constexpr char kQuestion[] = " Which animal jumps?";

std::string ModelPath() {
  RandomModelSpec s;
  s.layers = 3;
  s.dim = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 128;
  s.seed = 23;
  return ckv::testing::RandomModelPath("continuity", s);
}

struct Call {
  std::vector<int32_t> ids;
  v1::DecodeSummary summary;
  grpc::Status status;
};

class Client {
 public:
  explicit Client(int port)
      : stub_(v1::ClusterKv::NewStub(
            grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                grpc::InsecureChannelCredentials()))) {}

  std::string Create(const std::string& policy, const std::string& gqa) {
    ClientContext ctx;
    v1::CreateSessionRequest req;
    req.mutable_kv()->set_policy(policy);
    req.mutable_kv()->set_gqa_selection(gqa);
    v1::SessionInfo info;
    EXPECT_TRUE(stub_->CreateSession(&ctx, req, &info).ok());
    return info.session_id();
  }
  void Prefill(const std::string& id) {
    ClientContext ctx;
    auto stream = stub_->Prefill(&ctx);
    v1::PrefillRequest req;
    req.set_session_id(id);
    req.set_text(kDoc);
    stream->Write(req);
    stream->WritesDone();
    v1::PrefillResponse r;
    while (stream->Read(&r)) {
    }
    EXPECT_TRUE(stream->Finish().ok());
  }
  // Greedy, past end-of-generation, so that exactly n tokens stream.
  // Cancels the call after `cancel_after` tokens when >= 0.
  Call Decode(const std::string& id, const std::string& input, int n,
              int cancel_after = -1) {
    ClientContext ctx;
    v1::DecodeRequest req;
    req.set_session_id(id);
    if (!input.empty()) req.set_text(input);
    req.mutable_sampling()->set_max_tokens(n);
    req.mutable_sampling()->set_ignore_eos(true);
    auto reader = stub_->Decode(&ctx, req);
    Call c;
    v1::DecodeResponse r;
    while (reader->Read(&r)) {
      if (r.has_summary()) c.summary = r.summary();
      if (!r.has_token() || r.token().id() < 0) continue;
      c.ids.push_back(r.token().id());
      if (static_cast<int>(c.ids.size()) == cancel_after) ctx.TryCancel();
    }
    c.status = reader->Finish();
    return c;
  }
  int64_t Tokens(const std::string& id) {
    v1::SessionInfo info;
    for (int i = 0; i < 500; ++i) {  // a cancelled call may still hold it
      ClientContext ctx;
      v1::GetSessionRequest req;
      req.set_session_id(id);
      EXPECT_TRUE(stub_->GetSession(&ctx, req, &info).ok());
      if (!info.busy()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return info.tokens();
  }
  std::string Fork(const std::string& id) {
    ClientContext ctx;
    v1::ForkSessionRequest req;
    req.set_session_id(id);
    v1::SessionInfo info;
    EXPECT_TRUE(stub_->ForkSession(&ctx, req, &info).ok());
    return info.session_id();
  }
  void Snapshot(const std::string& id) {
    ClientContext ctx;
    v1::SnapshotSessionRequest req;
    req.set_session_id(id);
    v1::SnapshotSessionResponse resp;
    EXPECT_TRUE(stub_->SnapshotSession(&ctx, req, &resp).ok());
  }

 private:
  std::unique_ptr<v1::ClusterKv::Stub> stub_;
};

// Decodes `n` tokens and checks the token arithmetic of the call.
Call DecodeChecked(Client& c, const std::string& id, const std::string& input,
                   int n) {
  const int64_t before = c.Tokens(id);
  Call call = c.Decode(id, input, n);
  EXPECT_TRUE(call.status.ok()) << call.status.error_message();
  EXPECT_EQ(static_cast<int>(call.ids.size()), n);
  EXPECT_EQ(call.summary.generated_tokens(), n);
  EXPECT_EQ(call.summary.session_tokens(),
            before + call.summary.input_tokens() + n);
  EXPECT_EQ(c.Tokens(id), call.summary.session_tokens());
  return call;
}

std::vector<int32_t> Concat(std::vector<int32_t> a,
                            const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class DecodeContinuityTest
    : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {
 protected:
  void SetUp() override {
    dir_ = ckv::testing::TempPath(absl::StrCat(
        "continuity_", std::get<0>(GetParam()), "_", std::get<1>(GetParam())));
    fs::remove_all(dir_);
    Restart();
  }
  void Restart() {
    server_.reset();
    ServerConfig config = testing::SmallServerConfig(ModelPath());
    config.kv.window = 16;  // segments close during the decode calls
    config.kv.budget = 16;
    config.kv.tokens_per_cluster = 8;
    config.snapshot_dir = dir_;
    auto s = ClusterKvServer::Start(config, nullptr);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    client_ = std::make_unique<Client>(server_->port());
  }

  std::string dir_;
  std::unique_ptr<ClusterKvServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_P(DecodeContinuityTest, SplitCallsContinueExactly) {
  const auto [policy, gqa] = GetParam();
  Client& c = *client_;
  const std::string root = c.Create(policy, gqa);
  c.Prefill(root);
  const Call whole = DecodeChecked(c, c.Fork(root), kQuestion, kN);
  for (int a : {1, 7, kN - 1}) {
    const std::string id = c.Fork(root);
    const Call first = DecodeChecked(c, id, kQuestion, a);
    const Call rest = DecodeChecked(c, id, "", kN - a);
    EXPECT_EQ(Concat(first.ids, rest.ids), whole.ids) << "split at " << a;
  }
  // Three calls, the middle one with a fork in between: the fork continues
  // like its parent.
  const std::string id = c.Fork(root);
  const Call first = DecodeChecked(c, id, kQuestion, 5);
  const std::string child = c.Fork(id);
  EXPECT_EQ(c.Tokens(child), c.Tokens(id));
  const Call second = DecodeChecked(c, child, "", 9);
  const Call third = DecodeChecked(c, child, "", kN - 14);
  EXPECT_EQ(Concat(Concat(first.ids, second.ids), third.ids), whole.ids);
  EXPECT_EQ(DecodeChecked(c, id, "", kN - 5).ids,
            Concat(second.ids, third.ids));
}

TEST_P(DecodeContinuityTest, CancelledCallLeavesTheSessionAsBefore) {
  const auto [policy, gqa] = GetParam();
  Client& c = *client_;
  const std::string root = c.Create(policy, gqa);
  c.Prefill(root);
  const Call whole = DecodeChecked(c, c.Fork(root), kQuestion, kN);
  const std::string id = c.Fork(root);
  const Call first = DecodeChecked(c, id, kQuestion, 6);
  const int64_t tokens = c.Tokens(id);
  const Call cancelled = c.Decode(id, "", 4000, /*cancel_after=*/4);
  EXPECT_EQ(cancelled.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(c.Tokens(id), tokens);
  const Call rest = DecodeChecked(c, id, "", kN - 6);
  EXPECT_EQ(Concat(first.ids, rest.ids), whole.ids);
}

TEST_P(DecodeContinuityTest, SnapshotAndRestartContinueExactly) {
  const auto [policy, gqa] = GetParam();
  std::string id;
  std::vector<int32_t> whole, first;
  int64_t tokens = 0;
  {
    Client& c = *client_;
    const std::string root = c.Create(policy, gqa);
    c.Prefill(root);
    whole = DecodeChecked(c, c.Fork(root), kQuestion, kN).ids;
    id = c.Fork(root);
    first = DecodeChecked(c, id, kQuestion, 10).ids;
    tokens = c.Tokens(id);
    c.Snapshot(id);
  }
  Restart();
  Client& c = *client_;
  EXPECT_EQ(c.Tokens(id), tokens);  // restored by this first use
  const Call rest = DecodeChecked(c, id, "", kN - 10);
  EXPECT_EQ(Concat(first, rest.ids), whole);
}

INSTANTIATE_TEST_SUITE_P(
    PoliciesAndGqaModes, DecodeContinuityTest,
    ::testing::Combine(::testing::Values("full", "clusterkv", "quest",
                                         "streaming", "clusterkv_rerank"),
                       ::testing::Values("per_query_head", "per_kv_head")),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param), "_",
                          std::get<1>(info.param));
    });

}  // namespace
}  // namespace ckv::server
