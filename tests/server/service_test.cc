// Integration tests of clusterkv-server's gRPC service: a server started in
// this process on 127.0.0.1:0 with a random model, called over a real
// loopback channel.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "model/backend/cuda/cuda_backend.h"
#include "model/generation.h"
#include "model/make_random.h"
#include "model/model.h"
#include "server/metrics.h"
#include "server/server_runner.h"
#include "server/service_convert.h"
#include "tests/model/test_util.h"
#include "tests/server/service_test_util.h"
#include "tests/server/small_server_config.h"

namespace ckv::server {
namespace {

namespace v1 = ::clusterkv::v1;
using ::grpc::ClientContext;
using ::grpc::StatusCode;
using testing::BaseConfig;
using testing::Metrics;
using testing::ModelPath;
using testing::Spec;

// max_tokens of a stream that is still running when the test acts on it.
constexpr int kLong = 6000;

std::string Prompt(int i) {
  return absl::StrCat("Document ", i, ": the quick brown fox jumps over the ",
                      "lazy dog while clustered keys recall what matters; ",
                      "sessions share segments and forks answer questions. ",
                      "Paragraph ", i * 7 + 3, " ends here.");
}

struct Answer {
  std::vector<int32_t> ids;
  std::string text;
  grpc::Status status;
  v1::DecodeSummary summary;
};

Answer ReadDecode(grpc::ClientReader<v1::DecodeResponse>* reader) {
  Answer a;
  v1::DecodeResponse r;
  while (reader->Read(&r)) {
    if (r.has_token()) {
      if (r.token().id() >= 0) a.ids.push_back(r.token().id());
      a.text += r.token().text();
    } else {
      a.summary = r.summary();
    }
  }
  a.status = reader->Finish();
  return a;
}

// The greedy generation of `prompt` in process (model and settings of c)
// and by the running server, one-shot and as Prefill (in `parts` messages)
// + Decode.
struct ServedBothWays {
  GenerationResult ref;
  std::string ref_text;
  // The reference with the one-shot's layout: with the prefix cache on, a
  // session-less prompt closes a segment at every cache block
  // (docs/design.md "Prefix cache").
  GenerationResult ref_one_shot;
  std::string ref_one_shot_text;
  Answer one_shot;
  grpc::Status prefill;
  v1::PrefillSummary summary;
  Answer streamed;
};

class ServiceTest : public ::testing::Test {
 protected:
  void StartServer(const ServerConfig& config) {
    auto s = ClusterKvServer::Start(config, Metrics());
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::ClusterKv::NewStub(channel_);
  }
  void SetUp() override { StartServer(BaseConfig()); }
  // For tests that compare concurrent answers with sequential ones bit for
  // bit: every step takes whole chunks. The default input budget
  // (server/input_budget.h) splits an input by measured times while other
  // sessions decode, and a different split rounds differently (GEMV vs
  // GEMM, F16 KV), which can flip a near-tie of the random test model.
  void StartWithFixedChunks() {
    ServerConfig c = BaseConfig();
    c.prefill_share = 1.0;
    StartServer(c);
  }

  std::string Create(const v1::CreateSessionRequest& req = {}) {
    ClientContext ctx;
    v1::SessionInfo info;
    const grpc::Status s = stub_->CreateSession(&ctx, req, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info.session_id();
  }

  // Streams `text` in `parts` messages; returns the final status.
  grpc::Status Prefill(const std::string& id, const std::string& text,
                       int parts = 3, v1::PrefillSummary* summary = nullptr) {
    ClientContext ctx;
    auto stream = stub_->Prefill(&ctx);
    const size_t step = text.size() / parts + 1;
    for (size_t i = 0; i < text.size(); i += step) {
      v1::PrefillRequest req;
      if (i == 0) req.set_session_id(id);
      req.set_text(text.substr(i, step));
      if (!stream->Write(req)) break;
    }
    stream->WritesDone();
    v1::PrefillResponse r;
    while (stream->Read(&r)) {
      if (r.has_summary() && summary != nullptr) *summary = r.summary();
    }
    return stream->Finish();
  }

  Answer Decode(const v1::DecodeRequest& req) {
    ClientContext ctx;
    auto reader = stub_->Decode(&ctx, req);
    return ReadDecode(reader.get());
  }
  Answer Decode(const std::string& id, const std::string& text = "") {
    v1::DecodeRequest req;
    req.set_session_id(id);
    if (!text.empty()) req.set_text(text);
    return Decode(req);
  }
  Answer Generate(const v1::GenerateRequest& req) {
    ClientContext ctx;
    auto reader = stub_->Generate(&ctx, req);
    return ReadDecode(reader.get());
  }

  v1::SessionInfo Info(const std::string& id) {
    ClientContext ctx;
    v1::GetSessionRequest req;
    req.set_session_id(id);
    v1::SessionInfo info;
    EXPECT_TRUE(stub_->GetSession(&ctx, req, &info).ok());
    return info;
  }
  // Waits until no call holds the session.
  v1::SessionInfo IdleInfo(const std::string& id) {
    v1::SessionInfo info = Info(id);
    for (int i = 0; i < 500 && info.busy(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      info = Info(id);
    }
    return info;
  }

  // grpc.health.v1.Health/Check for `service` without generated stubs:
  // HealthCheckResponse is field 1 (enum): SERVING = 1, NOT_SERVING = 2.
  int HealthStatus(const std::string& service) {
    grpc::GenericStub generic(channel_);
    std::string req;
    if (!service.empty()) {
      req =
          std::string(1, '\x0a') + static_cast<char>(service.size()) + service;
    }
    grpc::Slice slice(req);
    grpc::ByteBuffer in(&slice, 1), out;
    ClientContext ctx;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", {}, &in, &out,
                      [&](grpc::Status s) {
                        std::lock_guard<std::mutex> l(mu);
                        status = s;
                        done = true;
                        cv.notify_one();
                      });
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
    if (!status.ok()) return -static_cast<int>(status.error_code());
    std::vector<grpc::Slice> slices;
    (void)out.Dump(&slices);
    std::string bytes;
    for (const auto& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    return bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : 0;
  }

  // Defined below ReferenceGenerate.
  ServedBothWays ServeBothWays(const ServerConfig& c, const std::string& prompt,
                               int parts);

  std::unique_ptr<ClusterKvServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ClusterKv::Stub> stub_;
};

// In-process reference: model/generation.h Generate() with the server's
// default KV settings and sampling; `prompt_block` > 0: the prompt's
// segments close at multiples of it.
GenerationResult ReferenceGenerate(const ServerConfig& c,
                                   const std::string& prompt, std::string* text,
                                   int64_t prompt_block = 0) {
  auto model = LoadModel(c.model_path);
  EXPECT_TRUE(model.ok());
  const Model& m = **model;
  TransformerOptions t;
  t.threads = c.threads;
  t.prefill_chunk = c.prefill_chunk;
  Transformer tf(m.config, m.weights, t);
  ClusterWorker worker;
  KvStoreConfig kv = c.kv;
  kv.max_tokens = c.limits.max_session_tokens;
  auto cache = NewKvCache(m.config, kv, kernels::DType::kF16, &worker);
  if (prompt_block > 0) {
    auto* store = dynamic_cast<ClusteredKvStore*>(cache.get());
    EXPECT_NE(store, nullptr);
    if (store != nullptr) store->set_prompt_block_tokens(prompt_block);
  }
  auto ids = m.tokenizer->Encode(prompt, true, true);
  EXPECT_TRUE(ids.ok());
  auto r = Generate(tf, *m.tokenizer, *cache, *ids, c.sampling,
                    [&](absl::string_view piece) {
                      text->append(piece.data(), piece.size());
                      return true;
                    });
  EXPECT_TRUE(r.ok()) << r.status();
  GenerationResult out = *r;
  // The server streams no event for an end-of-generation token.
  if (!out.tokens.empty() &&
      m.tokenizer->IsEndOfGeneration(out.tokens.back())) {
    out.tokens.pop_back();
  }
  return out;
}

ServedBothWays ServiceTest::ServeBothWays(const ServerConfig& c,
                                          const std::string& prompt,
                                          int parts) {
  ServedBothWays r;
  r.ref = ReferenceGenerate(c, prompt, &r.ref_text);
  r.ref_one_shot = ReferenceGenerate(
      c, prompt, &r.ref_one_shot_text,
      c.limits.prefix_cache_bytes > 0 ? c.limits.prefix_cache_block_tokens : 0);
  v1::GenerateRequest g;
  g.set_prompt(prompt);
  r.one_shot = Generate(g);
  const std::string id = Create();
  r.prefill = Prefill(id, prompt, parts, &r.summary);
  r.streamed = Decode(id);
  return r;
}

TEST_F(ServiceTest, GreedyTokensEqualInProcessGenerate) {
  const ServedBothWays r =
      ServeBothWays(BaseConfig(), Prompt(1) + Prompt(2) + Prompt(3), 4);
  const GenerationResult& ref = r.ref;
  ASSERT_FALSE(ref.tokens.empty());
  ASSERT_TRUE(r.one_shot.status.ok()) << r.one_shot.status.error_message();
  // The prompt spans two prefix-cache blocks: the one-shot's layout
  // differs from one segment, and so may its output.
  ASSERT_GT(ref.prompt_tokens, BaseConfig().limits.prefix_cache_block_tokens);
  EXPECT_EQ(r.one_shot.ids, r.ref_one_shot.tokens);
  EXPECT_EQ(r.one_shot.text, r.ref_one_shot_text);
  EXPECT_EQ(r.one_shot.summary.text(), r.ref_one_shot_text);
  EXPECT_EQ(r.one_shot.summary.input_tokens(), ref.prompt_tokens);
  EXPECT_EQ(r.one_shot.summary.cached_tokens(), 0);

  ASSERT_TRUE(r.prefill.ok());
  EXPECT_EQ(r.summary.prompt_tokens(), ref.prompt_tokens);
  EXPECT_EQ(r.summary.session_tokens(), ref.prompt_tokens);
  EXPECT_GT(r.summary.clusters_built(), 0);
  ASSERT_TRUE(r.streamed.status.ok()) << r.streamed.status.error_message();
  EXPECT_EQ(r.streamed.ids, ref.tokens);
  EXPECT_EQ(r.streamed.text, r.ref_text);
}

// A Q4_K_M file as make-random writes it (llama.cpp's mix: Q4_K matrices,
// Q6_K output and half of ffn_down) is served like any other: the model
// loads, and its greedy tokens over the wire, one-shot and as
// Prefill + Decode, equal the in-process generation's.
TEST_F(ServiceTest, ServesAQ4KMModel) {
  RandomModelSpec spec = Spec();
  spec.dim = 256;  // K-quant rows are multiples of 256
  spec.ffn = 512;
  ASSERT_TRUE(ParseRandomDType("q4_k_m", &spec));
  ServerConfig c = BaseConfig();
  c.model_path = ckv::testing::RandomModelPath("svc_q4km", spec);
  auto model = LoadModel(c.model_path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->weights.layers[0].w_up.type, kernels::DType::kQ4_K);
  EXPECT_EQ((*model)->weights.output.type, kernels::DType::kQ6_K);
  StartServer(c);
  const ServedBothWays r = ServeBothWays(c, Prompt(4) + Prompt(5), 3);
  ASSERT_FALSE(r.ref.tokens.empty());
  ASSERT_TRUE(r.one_shot.status.ok()) << r.one_shot.status.error_message();
  EXPECT_EQ(r.one_shot.ids, r.ref.tokens);
  ASSERT_TRUE(r.prefill.ok());
  ASSERT_TRUE(r.streamed.status.ok()) << r.streamed.status.error_message();
  EXPECT_EQ(r.streamed.ids, r.ref.tokens);
  EXPECT_EQ(r.streamed.text, r.ref_text);
}

TEST_F(ServiceTest, UnknownSessionIsNotFound) {
  ClientContext ctx;
  v1::GetSessionRequest req;
  req.set_session_id("s-nope");
  v1::SessionInfo info;
  EXPECT_EQ(stub_->GetSession(&ctx, req, &info).error_code(),
            StatusCode::NOT_FOUND);
  EXPECT_EQ(Decode("s-nope", "hi").status.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(Prefill("s-nope", "hello").error_code(), StatusCode::NOT_FOUND);
  ClientContext ctx2;
  v1::CloseSessionRequest close;
  close.set_session_id("s-nope");
  v1::CloseSessionResponse resp;
  EXPECT_EQ(stub_->CloseSession(&ctx2, close, &resp).error_code(),
            StatusCode::NOT_FOUND);
}

TEST_F(ServiceTest, BusySessionIsAborted) {
  const std::string id = Create();
  ASSERT_TRUE(Prefill(id, Prompt(1)).ok());
  v1::DecodeRequest req;
  req.set_session_id(id);
  req.mutable_sampling()->set_max_tokens(kLong);
  // Long on purpose: greedy decoding must not end at end-of-generation.
  req.mutable_sampling()->set_ignore_eos(true);
  ClientContext ctx;
  auto reader = stub_->Decode(&ctx, req);
  v1::DecodeResponse first;
  ASSERT_TRUE(reader->Read(&first));  // the call holds the session now
  EXPECT_EQ(Decode(id, "again").status.error_code(), StatusCode::ABORTED);
  EXPECT_EQ(Prefill(id, "more").error_code(), StatusCode::ABORTED);
  ctx.TryCancel();
  EXPECT_EQ(ReadDecode(reader.get()).status.error_code(),
            StatusCode::CANCELLED);
}

TEST_F(ServiceTest, InvalidArguments) {
  const std::string id = Create();
  // Empty input on an empty session, and an empty Prefill.
  EXPECT_EQ(Decode(id).status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Prefill(id, "").error_code(), StatusCode::INVALID_ARGUMENT);
  v1::GenerateRequest empty;
  EXPECT_EQ(Generate(empty).status.error_code(), StatusCode::INVALID_ARGUMENT);
  // Token ids outside the vocabulary.
  v1::DecodeRequest bad_ids;
  bad_ids.set_session_id(id);
  bad_ids.mutable_tokens()->add_ids(5);
  bad_ids.mutable_tokens()->add_ids(100000);
  EXPECT_EQ(Decode(bad_ids).status.error_code(), StatusCode::INVALID_ARGUMENT);
  bad_ids.mutable_tokens()->set_ids(1, -3);
  EXPECT_EQ(Decode(bad_ids).status.error_code(), StatusCode::INVALID_ARGUMENT);
  // Bad sampling and KV settings.
  v1::DecodeRequest bad_sampling;
  bad_sampling.set_session_id(id);
  bad_sampling.set_text("hi");
  bad_sampling.mutable_sampling()->set_temperature(-1.0f);
  EXPECT_EQ(Decode(bad_sampling).status.error_code(),
            StatusCode::INVALID_ARGUMENT);
  bad_sampling.mutable_sampling()->set_temperature(0.5f);
  bad_sampling.mutable_sampling()->set_top_p(1.5f);
  EXPECT_EQ(Decode(bad_sampling).status.error_code(),
            StatusCode::INVALID_ARGUMENT);
  bad_sampling.mutable_sampling()->set_top_p(0.9f);
  bad_sampling.mutable_sampling()->set_top_k(-3);
  EXPECT_EQ(Decode(bad_sampling).status.error_code(),
            StatusCode::INVALID_ARGUMENT);
  v1::CreateSessionRequest bad_kv;
  bad_kv.mutable_kv()->set_policy("nonsense");
  ClientContext ctx;
  v1::SessionInfo info;
  EXPECT_EQ(stub_->CreateSession(&ctx, bad_kv, &info).error_code(),
            StatusCode::INVALID_ARGUMENT);
  for (auto set : {+[](v1::CreateSessionRequest* r) {
                     r->mutable_sampling()->set_top_k(-3);
                   },
                   +[](v1::CreateSessionRequest* r) {
                     r->mutable_kv()->set_dense_layers(Spec().layers + 1);
                   },
                   +[](v1::CreateSessionRequest* r) {
                     r->mutable_kv()->set_policy("");
                   }}) {
    v1::CreateSessionRequest req;
    set(&req);
    ClientContext c;
    EXPECT_EQ(stub_->CreateSession(&c, req, &info).error_code(),
              StatusCode::INVALID_ARGUMENT)
        << req.ShortDebugString();
  }
  // Mixed text and ids in one Prefill call; a first message without id.
  {
    ClientContext c;
    auto stream = stub_->Prefill(&c);
    v1::PrefillRequest a;
    a.set_session_id(id);
    a.set_text("abc");
    stream->Write(a);
    v1::PrefillRequest b;
    b.mutable_tokens()->add_ids(5);
    stream->Write(b);
    stream->WritesDone();
    v1::PrefillResponse r;
    while (stream->Read(&r)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(Prefill("", "abc").error_code(), StatusCode::INVALID_ARGUMENT);
  // The session is untouched by every refused call.
  EXPECT_EQ(IdleInfo(id).tokens(), 0);
}

// Text fields are `bytes` on the wire, so invalid UTF-8 reaches the service,
// whose check (EncodeText) answers INVALID_ARGUMENT.
TEST(EncodeTextTest, InvalidUtf8IsInvalidArgument) {
  auto model = LoadModel(ModelPath());
  ASSERT_TRUE(model.ok());
  auto ids = EncodeText(*(*model)->tokenizer, std::string("ab\xff\xfe", 4),
                        /*add_bos=*/true);
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  auto ok = EncodeText(*(*model)->tokenizer, "ab", /*add_bos=*/true);
  ASSERT_TRUE(ok.ok());
  ASSERT_GT(ok->size(), 1u);
  EXPECT_EQ(ok->front(), (*model)->tokenizer->bos_id());
}

TEST_F(ServiceTest, InvalidUtf8IsRefused) {
  const std::string id = Create();
  const Answer a = Decode(id, std::string("ab\xff\xfe", 4));
  EXPECT_EQ(a.status.error_code(), StatusCode::INVALID_ARGUMENT)
      << a.status.error_message();
  EXPECT_EQ(Prefill(id, std::string("x\xc3", 2)).error_code(),
            StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(IdleInfo(id).tokens(), 0);
}

// RESOURCE_EXHAUSTED naming the limit in its message and, as data, in
// google.rpc.ErrorInfo (and RetryInfo for limits that free up) in the
// grpc-status-details-bin details.
void ExpectExhausted(const grpc::Status& s, const std::string& limit) {
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED) << limit;
  EXPECT_NE(s.error_message().find(limit), std::string::npos)
      << s.error_message();
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(s.error_details())) << limit;
  EXPECT_EQ(details.code(), static_cast<int>(StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_EQ(details.message(), s.error_message());
  google::rpc::ErrorInfo info;
  bool retry = false;
  for (const auto& any : details.details()) {
    if (any.Is<google::rpc::ErrorInfo>()) {
      ASSERT_TRUE(any.UnpackTo(&info));
    }
    retry = retry || any.Is<google::rpc::RetryInfo>();
  }
  EXPECT_EQ(info.reason(), absl::AsciiStrToUpper(limit));
  EXPECT_EQ(info.domain(), "clusterkv.v1");
  EXPECT_EQ(info.metadata().at("limit"), limit);
  EXPECT_FALSE(info.metadata().at("max").empty());
  EXPECT_EQ(retry,
            limit != "max_prompt_tokens" && limit != "max_session_tokens")
      << limit;
}

TEST_F(ServiceTest, LimitsAreResourceExhaustedNamingTheLimit) {
  ServerConfig c = BaseConfig();
  c.limits.max_prompt_tokens = 64;
  c.limits.max_session_tokens = 100;
  c.limits.max_sessions = 3;
  StartServer(c);
  const std::string id = Create();
  ExpectExhausted(Prefill(id, std::string(80, 'a')), "max_prompt_tokens");
  ASSERT_TRUE(Prefill(id, std::string(60, 'a')).ok());
  v1::DecodeRequest req;
  req.set_session_id(id);
  req.set_text(std::string(30, 'b'));
  req.mutable_sampling()->set_max_tokens(20);
  ExpectExhausted(Decode(req).status, "max_session_tokens");
  Create();
  Create();
  ClientContext ctx;
  v1::SessionInfo info;
  ExpectExhausted(stub_->CreateSession(&ctx, {}, &info), "max_sessions");
  v1::GenerateRequest g;
  g.set_prompt("hello");
  ExpectExhausted(Generate(g).status, "max_sessions");

  // Host bytes: room for ~50 tokens of this model (4 layers, 2 KV heads of
  // 32 dims, F16 K and V: 1 KiB per token).
  c.limits.max_host_kv_bytes = 50 * 1024;
  StartServer(c);
  const std::string small = Create();
  ExpectExhausted(Prefill(small, std::string(60, 'a')), "max_host_kv_bytes");
  EXPECT_TRUE(Prefill(small, std::string(20, 'a')).ok());
  c.limits.max_host_kv_bytes = int64_t{1} << 30;
  c.limits.max_device_kv_bytes = 4 * 1024;
  StartServer(c);
  ExpectExhausted(Prefill(Create(), std::string(60, 'a')),
                  "max_device_kv_bytes");
}

TEST_F(ServiceTest, CancelMidStreamRestoresTheSession) {
  const std::string id = Create();
  ASSERT_TRUE(Prefill(id, Prompt(4)).ok());
  const v1::SessionInfo before = IdleInfo(id);
  ASSERT_GT(before.tokens(), 0);
  v1::DecodeRequest req;
  req.set_session_id(id);
  req.set_text(" and a question?");
  req.mutable_sampling()->set_max_tokens(kLong);
  // Long on purpose: greedy decoding must not end at end-of-generation.
  req.mutable_sampling()->set_ignore_eos(true);
  ClientContext ctx;
  auto reader = stub_->Decode(&ctx, req);
  v1::DecodeResponse r;
  ASSERT_TRUE(reader->Read(&r));
  ASSERT_TRUE(reader->Read(&r));
  ctx.TryCancel();
  EXPECT_EQ(ReadDecode(reader.get()).status.error_code(),
            StatusCode::CANCELLED);
  const v1::SessionInfo after = IdleInfo(id);
  EXPECT_FALSE(after.busy());
  EXPECT_EQ(after.tokens(), before.tokens());
  EXPECT_EQ(after.memory().host_bytes(), before.memory().host_bytes());
  // The session still answers as if the cancelled call never happened.
  const Answer a = Decode(id, " and a question?");
  EXPECT_TRUE(a.status.ok()) << a.status.error_message();
}

TEST_F(ServiceTest, DeadlineCancelsTheJob) {
  const std::string id = Create();
  ASSERT_TRUE(Prefill(id, Prompt(5)).ok());
  const int64_t tokens = IdleInfo(id).tokens();
  v1::DecodeRequest req;
  req.set_session_id(id);
  req.mutable_sampling()->set_max_tokens(kLong);
  // Long on purpose: greedy decoding must not end at end-of-generation.
  req.mutable_sampling()->set_ignore_eos(true);
  ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(300));
  auto reader = stub_->Decode(&ctx, req);
  EXPECT_EQ(ReadDecode(reader.get()).status.error_code(),
            StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(IdleInfo(id).tokens(), tokens);
}

TEST_F(ServiceTest, ConcurrentSessionsMatchSequentialOnes) {
  StartWithFixedChunks();
  constexpr int kSessions = 8;
  std::vector<std::string> prompts;
  for (int i = 0; i < kSessions; ++i) prompts.push_back(Prompt(10 + i));
  auto run = [&](int i) {
    const std::string id = Create();
    EXPECT_TRUE(Prefill(id, prompts[i]).ok());
    Answer a = Decode(id, " Summary:");
    EXPECT_TRUE(a.status.ok()) << a.status.error_message();
    return a.ids;
  };
  std::vector<std::vector<int32_t>> alone(kSessions), together(kSessions);
  for (int i = 0; i < kSessions; ++i) alone[i] = run(i);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] { together[i] = run(i); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) {
    EXPECT_FALSE(alone[i].empty());
    EXPECT_EQ(together[i], alone[i]) << "session " << i;
  }
}

TEST_F(ServiceTest, ForksShareTheDocumentAndAnswerConcurrently) {
  StartWithFixedChunks();
  const std::string parent = Create();
  ASSERT_TRUE(Prefill(parent, Prompt(20) + Prompt(21) + Prompt(22)).ok());
  const int64_t single = IdleInfo(parent).memory().host_bytes();
  auto fork = [&] {
    ClientContext ctx;
    v1::ForkSessionRequest req;
    req.set_session_id(parent);
    v1::SessionInfo info;
    EXPECT_TRUE(stub_->ForkSession(&ctx, req, &info).ok());
    EXPECT_EQ(info.parent_session_id(), parent);
    return info.session_id();
  };
  const std::string questions[2] = {" Who jumps?", " What is shared?"};
  std::vector<int32_t> sequential[2], concurrent[2];
  for (int i = 0; i < 2; ++i) sequential[i] = Decode(fork(), questions[i]).ids;
  const std::string forks[2] = {fork(), fork()};
  std::thread t0([&] { concurrent[0] = Decode(forks[0], questions[0]).ids; });
  std::thread t1([&] { concurrent[1] = Decode(forks[1], questions[1]).ids; });
  t0.join();
  t1.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(sequential[i].empty());
    EXPECT_EQ(concurrent[i], sequential[i]) << "question " << i;
  }
  const v1::SessionInfo child = IdleInfo(forks[0]);
  EXPECT_GT(child.memory().host_shared_bytes(), 0);
  // Parent + 4 forks: the document is counted once in the server's total.
  ClientContext ctx;
  v1::ServerInfo server;
  ASSERT_TRUE(stub_->GetServerInfo(&ctx, {}, &server).ok());
  const int64_t total = server.limits().max_host_kv_bytes() -
                        server.capacity().free_host_kv_bytes();
  EXPECT_LT(total, 2 * single);
  EXPECT_GT(total, single / 2);
}

TEST_F(ServiceTest, SessionLifecycleAndServerInfo) {
  v1::CreateSessionRequest req;
  req.mutable_kv()->set_policy("quest");
  req.mutable_kv()->set_budget(48);
  req.mutable_sampling()->set_max_tokens(3);
  const std::string id = Create(req);
  const v1::SessionInfo info = Info(id);
  EXPECT_EQ(info.kv().policy(), "quest");
  EXPECT_EQ(info.kv().budget(), 48);
  EXPECT_EQ(info.kv().window(), BaseConfig().kv.window);
  EXPECT_EQ(info.sampling().max_tokens(), 3);
  ASSERT_TRUE(Prefill(id, Prompt(30)).ok());
  const Answer a = Decode(id, "?");
  EXPECT_TRUE(a.status.ok());
  EXPECT_LE(a.summary.generated_tokens(), 3);
  {
    ClientContext ctx;
    v1::ListSessionsResponse list;
    ASSERT_TRUE(stub_->ListSessions(&ctx, {}, &list).ok());
    EXPECT_EQ(list.sessions_size(), 1);
  }
  ClientContext ctx;
  v1::CloseSessionRequest close;
  close.set_session_id(id);
  v1::CloseSessionResponse closed;
  ASSERT_TRUE(stub_->CloseSession(&ctx, close, &closed).ok());
  EXPECT_GT(closed.freed_host_bytes(), 0);
  ClientContext ctx2;
  v1::ServerInfo server;
  ASSERT_TRUE(stub_->GetServerInfo(&ctx2, {}, &server).ok());
  EXPECT_EQ(server.model().layers(), Spec().layers);
  EXPECT_EQ(server.capacity().free_sessions(),
            BaseConfig().limits.max_sessions);
  EXPECT_FALSE(server.draining());
  // BaseConfig asks for --backend auto: this build resolves it to the CPU,
  // which has a device name (the CPU model) and no device memory.
  EXPECT_EQ(BaseConfig().backend, BackendKind::kAuto);
  EXPECT_EQ(server.backend(), "cpu");
  EXPECT_NE(server.device_name(), "");
  EXPECT_NE(server.device_name().find("threads"), std::string::npos)
      << server.device_name();
  EXPECT_EQ(server.device_memory_bytes(), 0);
}

// --backend fake: the device backend on the fake device serves the same
// greedy tokens as the in-process CPU generation, one-shot and as Prefill +
// Decode, and GetServerInfo names the fake device and its memory.
TEST_F(ServiceTest, ServesOnTheFakeDevice) {
  ServerConfig c = BaseConfig();
  c.backend = BackendKind::kFake;
  // Both cache modes (--cache-mode): copy keeps its block caches on the
  // device; the tokens are the CPU reference's either way.
  for (const CacheMode mode : {CacheMode::kCopy, CacheMode::kZeroCopy}) {
    SCOPED_TRACE(CacheModeName(mode));
    c.kv.cache_mode = mode;
    server_.reset();
    StartServer(c);
    const ServedBothWays r = ServeBothWays(c, Prompt(6) + Prompt(7), 3);
    ASSERT_FALSE(r.ref.tokens.empty());
    ASSERT_TRUE(r.one_shot.status.ok()) << r.one_shot.status.error_message();
    EXPECT_EQ(r.one_shot.ids, r.ref_one_shot.tokens);
    ASSERT_TRUE(r.prefill.ok());
    ASSERT_TRUE(r.streamed.status.ok()) << r.streamed.status.error_message();
    EXPECT_EQ(r.streamed.ids, r.ref.tokens);
    EXPECT_EQ(r.streamed.text, r.ref_text);
  }
  ClientContext ctx;
  v1::ServerInfo server;
  ASSERT_TRUE(stub_->GetServerInfo(&ctx, {}, &server).ok());
  EXPECT_EQ(server.backend(), "fake");
  EXPECT_NE(server.device_name().find("fake device (schedule"),
            std::string::npos)
      << server.device_name();
  EXPECT_EQ(server.device_memory_bytes(), BackendOptions{}.fake_device_bytes);
}

// A sticky device failure (the fake device too small for the weights)
// fails the request with INTERNAL and turns health to NOT_SERVING, so that
// an orchestrator restarts the server; GetServerInfo still answers.
TEST_F(ServiceTest, BackendFailureMakesHealthNotServing) {
  ServerConfig c = BaseConfig();
  c.backend = BackendKind::kFake;
  c.fake_device_bytes = 64 << 10;
  server_.reset();
  StartServer(c);
  EXPECT_EQ(HealthStatus(""), 1);
  const std::string id = Create();
  const grpc::Status failed = Prefill(id, Prompt(40));
  EXPECT_EQ(failed.error_code(), StatusCode::INTERNAL)
      << failed.error_message();
  EXPECT_NE(failed.error_message().find("out of memory"), std::string::npos)
      << failed.error_message();
  EXPECT_EQ(HealthStatus(""), 2);
  EXPECT_EQ(HealthStatus("clusterkv.v1.ClusterKv"), 2);
  ClientContext ctx;
  v1::ServerInfo server;
  EXPECT_TRUE(stub_->GetServerInfo(&ctx, {}, &server).ok());
}

TEST_F(ServiceTest, DrainStopsServingAndCancelsLongStreams) {
  EXPECT_EQ(HealthStatus(""), 1);
  EXPECT_EQ(HealthStatus("clusterkv.v1.ClusterKv"), 1);
  const std::string id = Create();
  ASSERT_TRUE(Prefill(id, Prompt(40)).ok());
  v1::DecodeRequest req;
  req.set_session_id(id);
  req.mutable_sampling()->set_max_tokens(kLong);
  // Long on purpose: greedy decoding must not end at end-of-generation.
  req.mutable_sampling()->set_ignore_eos(true);
  ClientContext ctx;
  auto reader = stub_->Decode(&ctx, req);
  v1::DecodeResponse r;
  ASSERT_TRUE(reader->Read(&r));
  server_->BeginDrain();
  EXPECT_EQ(HealthStatus(""), 2);
  EXPECT_EQ(HealthStatus("clusterkv.v1.ClusterKv"), 2);
  EXPECT_EQ(Decode(id, "x").status.error_code(), StatusCode::UNAVAILABLE);
  std::thread drain([&] { server_->FinishDrain(absl::Milliseconds(200)); });
  EXPECT_EQ(ReadDecode(reader.get()).status.error_code(),
            StatusCode::UNAVAILABLE);
  drain.join();
}

}  // namespace
}  // namespace ckv::server
