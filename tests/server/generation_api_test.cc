// What users of other servers expect from a generation call, over a real
// loopback channel: the llama.cpp/vLLM sampling fields, per-token
// log-probabilities, Tokenize/Detokenize, CancelSession and
// keep_partial_on_cancel.
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "model/generation.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "server/server_runner.h"
#include "server/service_convert.h"
#include "tests/model/test_util.h"
#include "tests/server/small_server_config.h"

namespace ckv::server {
namespace {

namespace v1 = ::clusterkv::v1;
using ::grpc::ClientContext;
using ::grpc::StatusCode;

// max_tokens of a stream cancelled midway: seconds of decoding even in
// Release (6,000 took 0.76 s there), so the cancel lands before it ends.
constexpr int kLong = 60000;
constexpr char kAlice[] = "tokA-5e1f0c2b9a";
constexpr char kBob[] = "tokB-88d1e4a7c3";

std::string ModelPath() {
  RandomModelSpec s;
  s.layers = 3;
  s.dim = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 128;
  s.seed = 11;
  return ckv::testing::RandomModelPath("genapi", s);
}

const Model& InProcessModel() {
  static const Model* m = LoadModel(ModelPath()).value().release();
  return *m;
}

std::string Prompt() {
  return "The quick brown fox jumps over the lazy dog; clustered keys recall "
         "what matters and forks answer questions about the document.";
}

struct Answer {
  std::vector<int32_t> ids;
  std::vector<v1::TokenEvent> events;  // those with id >= 0
  std::string text;
  grpc::Status status;
  v1::DecodeSummary summary;
};

Answer ReadAll(grpc::ClientReader<v1::DecodeResponse>* reader) {
  Answer a;
  v1::DecodeResponse r;
  while (reader->Read(&r)) {
    if (r.has_token()) {
      if (r.token().id() >= 0) {
        a.ids.push_back(r.token().id());
        a.events.push_back(r.token());
      }
      a.text += r.token().text();
    } else {
      a.summary = r.summary();
    }
  }
  a.status = reader->Finish();
  return a;
}

class GenerationApiTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(Config()); }
  static ServerConfig Config() {
    ServerConfig c = testing::SmallServerConfig(ModelPath());
    c.limits.max_session_tokens = 2 * kLong;  // a kLong stream fits
    return c;
  }
  void Start(const ServerConfig& c) {
    server_.reset();
    auto s = ClusterKvServer::Start(c, nullptr);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    stub_ = v1::ClusterKv::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials()));
  }
  // A context with `token` as bearer token ("" = none).
  std::unique_ptr<ClientContext> Ctx(const std::string& token = "") {
    auto ctx = std::make_unique<ClientContext>();
    if (!token.empty()) {
      ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    }
    return ctx;
  }
  std::string Create(const std::string& token = "") {
    v1::SessionInfo info;
    EXPECT_TRUE(stub_->CreateSession(Ctx(token).get(), {}, &info).ok());
    return info.session_id();
  }
  grpc::Status Prefill(const std::string& id, const std::string& text,
                       const std::string& token = "") {
    auto ctx = Ctx(token);
    auto stream = stub_->Prefill(ctx.get());
    v1::PrefillRequest req;
    req.set_session_id(id);
    req.set_text(text);
    stream->Write(req);
    stream->WritesDone();
    v1::PrefillResponse r;
    while (stream->Read(&r)) {
    }
    return stream->Finish();
  }
  Answer Decode(const v1::DecodeRequest& req) {
    ClientContext ctx;
    return ReadAll(stub_->Decode(&ctx, req).get());
  }
  Answer Generate(const v1::GenerateRequest& req) {
    ClientContext ctx;
    return ReadAll(stub_->Generate(&ctx, req).get());
  }
  v1::SessionInfo IdleInfo(const std::string& id) {
    v1::SessionInfo info;
    for (int i = 0; i < 500; ++i) {
      ClientContext ctx;
      v1::GetSessionRequest req;
      req.set_session_id(id);
      EXPECT_TRUE(stub_->GetSession(&ctx, req, &info).ok());
      if (!info.busy()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return info;
  }
  grpc::Status Cancel(const std::string& id, bool* cancelled,
                      const std::string& token = "") {
    v1::CancelSessionRequest req;
    req.set_session_id(id);
    v1::CancelSessionResponse resp;
    const grpc::Status s = stub_->CancelSession(Ctx(token).get(), req, &resp);
    *cancelled = resp.cancelled();
    return s;
  }

  std::unique_ptr<ClusterKvServer> server_;
  std::unique_ptr<v1::ClusterKv::Stub> stub_;
};

// The server's one-shot Generate equals model/generation.h Generate() with
// the same sampling fields (penalty window seeded with the prompt).
std::vector<int32_t> InProcessGenerate(const std::string& prompt,
                                       const SamplingParams& sampling) {
  const ServerConfig c = testing::SmallServerConfig(ModelPath());
  const Model& m = InProcessModel();
  TransformerOptions t;
  t.threads = c.threads;
  t.prefill_chunk = c.prefill_chunk;
  Transformer tf(m.config, m.weights, t);
  ClusterWorker worker;
  KvStoreConfig kv = c.kv;
  kv.max_tokens = c.limits.max_session_tokens;
  auto cache = NewKvCache(m.config, kv, kernels::DType::kF16, &worker);
  auto ids = m.tokenizer->Encode(prompt, true, true);
  EXPECT_TRUE(ids.ok());
  auto r = Generate(tf, *m.tokenizer, *cache, *ids, sampling,
                    [](absl::string_view) { return true; });
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<int32_t> out = r->tokens;
  if (!out.empty() && m.tokenizer->IsEndOfGeneration(out.back())) {
    out.pop_back();
  }
  return out;
}

TEST_F(GenerationApiTest, PenaltiesAndBiasMatchInProcessGeneration) {
  SamplingParams p = testing::SmallServerConfig(ModelPath()).sampling;
  p.max_tokens = 16;
  p.ignore_eos = true;
  p.repetition_penalty = 1.7f;
  p.frequency_penalty = 0.6f;
  p.presence_penalty = 0.4f;
  p.penalty_last_n = 24;
  p.logit_bias = {{7, 3.0f}, {11, -5.0f}};
  v1::GenerateRequest g;
  g.set_prompt(Prompt());
  v1::SamplingParams* s = g.mutable_sampling();
  s->set_max_tokens(p.max_tokens);
  s->set_ignore_eos(true);
  s->set_repetition_penalty(p.repetition_penalty);
  s->set_frequency_penalty(p.frequency_penalty);
  s->set_presence_penalty(p.presence_penalty);
  s->set_penalty_last_n(p.penalty_last_n);
  (*s->mutable_logit_bias())[7] = 3.0f;
  (*s->mutable_logit_bias())[11] = -5.0f;
  const Answer penalised = Generate(g);
  ASSERT_TRUE(penalised.status.ok()) << penalised.status.error_message();
  EXPECT_EQ(penalised.ids, InProcessGenerate(Prompt(), p));
  // The fields change the outcome (greedy on this model repeats tokens).
  SamplingParams plain = p;
  plain.repetition_penalty = 1.0f;
  plain.frequency_penalty = plain.presence_penalty = 0.0f;
  plain.logit_bias.clear();
  EXPECT_NE(penalised.ids, InProcessGenerate(Prompt(), plain));
  // Sampled (temperature, top-k, top-p, min-p, seed) matches too.
  p.temperature = 0.9f;
  p.top_k = 20;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.seed = 1234;
  s->set_temperature(p.temperature);
  s->set_top_k(p.top_k);
  s->set_top_p(p.top_p);
  s->set_min_p(p.min_p);
  s->set_seed(p.seed);
  const Answer sampled = Generate(g);
  ASSERT_TRUE(sampled.status.ok());
  EXPECT_EQ(sampled.ids, InProcessGenerate(Prompt(), p));
}

TEST_F(GenerationApiTest, LogitBiasForcesAToken) {
  v1::GenerateRequest g;
  g.set_prompt(Prompt());
  g.mutable_sampling()->set_max_tokens(6);
  g.mutable_sampling()->set_ignore_eos(true);
  (*g.mutable_sampling()->mutable_logit_bias())[42] = 100.0f;
  const Answer a = Generate(g);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_EQ(a.ids, std::vector<int32_t>(6, 42));
}

TEST_F(GenerationApiTest, NewSamplingFieldsAreValidated) {
  const std::string id = Create();
  ASSERT_TRUE(Prefill(id, Prompt()).ok());
  const int64_t tokens = IdleInfo(id).tokens();
  const int vocab = InProcessModel().config.vocab_size;
  std::vector<std::function<void(v1::SamplingParams*)>> bad = {
      [](v1::SamplingParams* s) { s->set_min_p(1.5f); },
      [](v1::SamplingParams* s) { s->set_min_p(NAN); },
      [](v1::SamplingParams* s) { s->set_repetition_penalty(0.0f); },
      [](v1::SamplingParams* s) { s->set_repetition_penalty(-1.0f); },
      [](v1::SamplingParams* s) { s->set_frequency_penalty(2.5f); },
      [](v1::SamplingParams* s) { s->set_presence_penalty(-2.5f); },
      [](v1::SamplingParams* s) { s->set_penalty_last_n(-1); },
      [](v1::SamplingParams* s) {
        s->set_penalty_last_n(kMaxPenaltyLastN + 1);
      },
      [=](v1::SamplingParams* s) { (*s->mutable_logit_bias())[vocab] = 1; },
      [](v1::SamplingParams* s) { (*s->mutable_logit_bias())[-4] = 1; },
      [](v1::SamplingParams* s) { (*s->mutable_logit_bias())[3] = 101; },
      [](v1::SamplingParams* s) { s->set_logprobs(kMaxLogprobs + 1); },
      [](v1::SamplingParams* s) { s->set_logprobs(-1); },
      [](v1::SamplingParams* s) { s->set_top_k(-3); },
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    v1::DecodeRequest req;
    req.set_session_id(id);
    req.set_text(" more");
    bad[i](req.mutable_sampling());
    EXPECT_EQ(Decode(req).status.error_code(), StatusCode::INVALID_ARGUMENT)
        << i;
    v1::CreateSessionRequest create;
    bad[i](create.mutable_sampling());
    ClientContext ctx;
    v1::SessionInfo info;
    EXPECT_EQ(stub_->CreateSession(&ctx, create, &info).error_code(),
              StatusCode::INVALID_ARGUMENT)
        << i;
  }
  // The edges are accepted and echoed as the session's defaults.
  v1::CreateSessionRequest create;
  v1::SamplingParams* s = create.mutable_sampling();
  s->set_min_p(1.0f);
  s->set_repetition_penalty(kMaxRepetitionPenalty);
  s->set_frequency_penalty(-2.0f);
  s->set_presence_penalty(2.0f);
  s->set_penalty_last_n(kMaxPenaltyLastN);
  (*s->mutable_logit_bias())[vocab - 1] = -100.0f;
  s->set_logprobs(kMaxLogprobs);
  ClientContext ctx;
  v1::SessionInfo info;
  ASSERT_TRUE(stub_->CreateSession(&ctx, create, &info).ok());
  EXPECT_EQ(info.sampling().min_p(), 1.0f);
  EXPECT_EQ(info.sampling().penalty_last_n(), kMaxPenaltyLastN);
  EXPECT_EQ(info.sampling().logit_bias().at(vocab - 1), -100.0f);
  EXPECT_EQ(info.sampling().logprobs(), kMaxLogprobs);
  EXPECT_EQ(IdleInfo(id).tokens(), tokens);  // refused calls change nothing
}

TEST_F(GenerationApiTest, LogprobsInEveryTokenEvent) {
  v1::GenerateRequest g;
  g.set_prompt(Prompt());
  g.mutable_sampling()->set_max_tokens(8);
  g.mutable_sampling()->set_ignore_eos(true);
  g.mutable_sampling()->set_logprobs(5);
  const Answer greedy = Generate(g);
  ASSERT_TRUE(greedy.status.ok()) << greedy.status.error_message();
  ASSERT_EQ(greedy.events.size(), 8u);
  const Tokenizer& tok = *InProcessModel().tokenizer;
  for (const v1::TokenEvent& e : greedy.events) {
    ASSERT_TRUE(e.has_logprob());
    ASSERT_EQ(e.top_logprobs_size(), 5);
    EXPECT_EQ(e.top_logprobs(0).id(), e.id());  // greedy: the most likely
    EXPECT_FLOAT_EQ(e.top_logprobs(0).logprob(), e.logprob());
    double mass = 0;
    for (int i = 0; i < 5; ++i) {
      const v1::TokenLogprob& t = e.top_logprobs(i);
      EXPECT_LE(t.logprob(), 0.0f);
      if (i > 0) {
        EXPECT_LE(t.logprob(), e.top_logprobs(i - 1).logprob());
      }
      EXPECT_EQ(t.piece(), tok.TokenToPiece(t.id(), true));
      mass += std::exp(t.logprob());
    }
    EXPECT_LE(mass, 1.0 + 1e-4);
  }
  // Sampled: the chosen token's logprob is one of the distribution's.
  g.mutable_sampling()->set_temperature(1.5f);
  g.mutable_sampling()->set_top_k(0);
  g.mutable_sampling()->set_top_p(1.0f);
  g.mutable_sampling()->set_logprobs(kMaxLogprobs);
  const Answer sampled = Generate(g);
  ASSERT_TRUE(sampled.status.ok());
  for (const v1::TokenEvent& e : sampled.events) {
    ASSERT_EQ(e.top_logprobs_size(), kMaxLogprobs);
    EXPECT_LE(e.logprob(), e.top_logprobs(0).logprob());
    for (const v1::TokenLogprob& t : e.top_logprobs()) {
      if (t.id() == e.id()) {
        EXPECT_FLOAT_EQ(t.logprob(), e.logprob());
      }
    }
  }
  // 0: only the chosen token's; unset: none.
  g.mutable_sampling()->set_logprobs(0);
  const Answer chosen_only = Generate(g);
  ASSERT_FALSE(chosen_only.events.empty());
  EXPECT_TRUE(chosen_only.events[0].has_logprob());
  EXPECT_EQ(chosen_only.events[0].top_logprobs_size(), 0);
  g.mutable_sampling()->clear_logprobs();
  const Answer none = Generate(g);
  ASSERT_FALSE(none.events.empty());
  EXPECT_FALSE(none.events[0].has_logprob());
}

TEST_F(GenerationApiTest, TokenizeAndDetokenize) {
  const Tokenizer& tok = *InProcessModel().tokenizer;
  const std::string text = "Hello wörld, <|eot|> tokens ✓";
  v1::TokenizeRequest req;
  req.set_text(text);
  req.set_with_pieces(true);
  v1::TokenizeResponse resp;
  {
    ClientContext ctx;
    ASSERT_TRUE(stub_->Tokenize(&ctx, req, &resp).ok());
  }
  const auto want = tok.Encode(text, false, true);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(std::vector<int32_t>(resp.ids().begin(), resp.ids().end()), *want);
  ASSERT_EQ(resp.pieces_size(), resp.ids_size());
  std::string joined;
  for (const std::string& p : resp.pieces()) joined += p;
  EXPECT_EQ(joined, tok.Decode(*want));
  // add_special follows the vocabulary's BOS/EOS rules.
  req.set_add_special(true);
  req.set_parse_special(false);
  {
    ClientContext ctx;
    ASSERT_TRUE(stub_->Tokenize(&ctx, req, &resp).ok());
  }
  const auto special = tok.Encode(text, true, false);
  ASSERT_TRUE(special.ok());
  EXPECT_EQ(std::vector<int32_t>(resp.ids().begin(), resp.ids().end()),
            *special);
  // Round trip through Detokenize.
  v1::DetokenizeRequest d;
  d.mutable_ids()->Add(want->begin(), want->end());
  v1::DetokenizeResponse text_back;
  {
    ClientContext ctx;
    ASSERT_TRUE(stub_->Detokenize(&ctx, d, &text_back).ok());
  }
  EXPECT_EQ(text_back.text(), tok.Decode(*want, false));
  // Invalid input.
  req.set_text(std::string("ab\xff", 3));
  {
    ClientContext ctx;
    EXPECT_EQ(stub_->Tokenize(&ctx, req, &resp).error_code(),
              StatusCode::INVALID_ARGUMENT);
  }
  for (int32_t id : {-1, InProcessModel().config.vocab_size}) {
    v1::DetokenizeRequest bad;
    bad.add_ids(1);
    bad.add_ids(id);
    ClientContext ctx;
    EXPECT_EQ(stub_->Detokenize(&ctx, bad, &text_back).error_code(),
              StatusCode::INVALID_ARGUMENT)
        << id;
  }
  v1::DetokenizeRequest many;
  many.mutable_ids()->Resize(kMaxDetokenizeIds + 1, 1);
  {
    ClientContext ctx;
    EXPECT_EQ(stub_->Detokenize(&ctx, many, &text_back).error_code(),
              StatusCode::INVALID_ARGUMENT);
  }
}

// Opens a long greedy Decode and reads `n` token events.
std::unique_ptr<grpc::ClientReader<v1::DecodeResponse>> StartLong(
    v1::ClusterKv::Stub& stub, ClientContext* ctx, const std::string& id,
    bool keep_partial, int n, Answer* first) {
  v1::DecodeRequest req;
  req.set_session_id(id);
  req.set_text(" and a question?");
  req.mutable_sampling()->set_max_tokens(kLong);
  req.mutable_sampling()->set_ignore_eos(true);
  req.set_keep_partial_on_cancel(keep_partial);
  auto reader = stub.Decode(ctx, req);
  v1::DecodeResponse r;
  while (static_cast<int>(first->ids.size()) < n && reader->Read(&r)) {
    if (r.has_token() && r.token().id() >= 0) {
      first->ids.push_back(r.token().id());
    }
  }
  return reader;
}

TEST_F(GenerationApiTest, CancelSessionCancelsTheRunningCall) {
  const std::string id = Create();
  ASSERT_TRUE(Prefill(id, Prompt()).ok());
  const int64_t before = IdleInfo(id).tokens();
  bool cancelled = true;
  ASSERT_TRUE(Cancel(id, &cancelled).ok());  // idle: OK, nothing cancelled
  EXPECT_FALSE(cancelled);
  EXPECT_EQ(Cancel("s-unknown", &cancelled).error_code(),
            StatusCode::NOT_FOUND);
  EXPECT_EQ(Cancel("", &cancelled).error_code(), StatusCode::INVALID_ARGUMENT);

  ClientContext ctx;
  Answer got;
  auto reader = StartLong(*stub_, &ctx, id, /*keep_partial=*/false, 2, &got);
  ASSERT_TRUE(Cancel(id, &cancelled).ok());
  EXPECT_TRUE(cancelled);
  const Answer rest = ReadAll(reader.get());
  EXPECT_EQ(rest.status.error_code(), StatusCode::CANCELLED);
  EXPECT_EQ(IdleInfo(id).tokens(), before);  // rolled back (default)
}

TEST_F(GenerationApiTest, KeepPartialOnCancelKeepsTheStreamedTokens) {
  const std::string id = Create();
  ASSERT_TRUE(Prefill(id, Prompt()).ok());
  // The reference is a fork taken now, decoded uninterrupted after the
  // cancellation for as many tokens as were streamed plus five: how many
  // tokens stream before the cancel lands depends on the machine's load.
  ClientContext fctx;
  v1::ForkSessionRequest freq;
  freq.set_session_id(id);
  v1::SessionInfo fork;
  ASSERT_TRUE(stub_->ForkSession(&fctx, freq, &fork).ok());
  const int64_t before = IdleInfo(id).tokens();

  ClientContext ctx;
  Answer got;
  auto reader = StartLong(*stub_, &ctx, id, /*keep_partial=*/true, 3, &got);
  bool cancelled = false;
  ASSERT_TRUE(Cancel(id, &cancelled).ok());
  EXPECT_TRUE(cancelled);
  const Answer rest = ReadAll(reader.get());
  EXPECT_EQ(rest.status.error_code(), StatusCode::CANCELLED);
  std::vector<int32_t> streamed = got.ids;
  streamed.insert(streamed.end(), rest.ids.begin(), rest.ids.end());
  ASSERT_GE(streamed.size(), 3u);
  ASSERT_LT(streamed.size(), static_cast<size_t>(kLong));

  v1::DecodeRequest whole;
  whole.set_session_id(fork.session_id());
  whole.set_text(" and a question?");
  whole.mutable_sampling()->set_max_tokens(static_cast<int>(streamed.size()) +
                                           5);
  whole.mutable_sampling()->set_ignore_eos(true);
  const Answer reference = Decode(whole);
  ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
  ASSERT_EQ(reference.ids.size(), streamed.size() + 5);
  const int64_t input_tokens = reference.summary.input_tokens();
  // Every streamed token is in the session, and they are the reference's.
  EXPECT_EQ(IdleInfo(id).tokens(),
            before + input_tokens + static_cast<int64_t>(streamed.size()));
  EXPECT_EQ(streamed,
            std::vector<int32_t>(reference.ids.begin(),
                                 reference.ids.begin() + streamed.size()));
  // The session continues where the stream stopped.
  v1::DecodeRequest next;
  next.set_session_id(id);
  next.mutable_sampling()->set_max_tokens(5);
  next.mutable_sampling()->set_ignore_eos(true);
  const Answer more = Decode(next);
  ASSERT_TRUE(more.status.ok()) << more.status.error_message();
  EXPECT_EQ(more.ids,
            std::vector<int32_t>(reference.ids.begin() + streamed.size(),
                                 reference.ids.begin() + streamed.size() + 5));

  // A client cancellation keeps them too (the client may not have read
  // every token the server generated: at least those it read).
  const int64_t now = IdleInfo(id).tokens();
  ClientContext ctx2;
  Answer got2;
  auto reader2 = StartLong(*stub_, &ctx2, id, /*keep_partial=*/true, 2, &got2);
  ctx2.TryCancel();
  EXPECT_EQ(ReadAll(reader2.get()).status.error_code(), StatusCode::CANCELLED);
  EXPECT_GE(IdleInfo(id).tokens(), now + input_tokens + 2);
}

TEST_F(GenerationApiTest, CancelSessionOfAnotherTenantIsNotFound) {
  const std::string tokens = ckv::testing::TempPath("genapi_tokens.txt");
  {
    std::ofstream out(tokens);
    out << kAlice << " alice\n" << kBob << " bob\n";
  }
  ServerConfig c = Config();
  c.auth_tokens_file = tokens;
  Start(c);
  const std::string id = Create(kAlice);
  ASSERT_TRUE(Prefill(id, Prompt(), kAlice).ok());
  auto ctx = Ctx(kAlice);
  Answer got;
  auto reader = StartLong(*stub_, ctx.get(), id, false, 1, &got);
  bool cancelled = true;
  EXPECT_EQ(Cancel(id, &cancelled, kBob).error_code(), StatusCode::NOT_FOUND);
  // Bob's call cancelled nothing: alice's stream goes on.
  v1::DecodeResponse r;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(reader->Read(&r));
  ASSERT_TRUE(Cancel(id, &cancelled, kAlice).ok());
  EXPECT_TRUE(cancelled);
  EXPECT_EQ(ReadAll(reader.get()).status.error_code(), StatusCode::CANCELLED);
}

// Runs the clusterkv binary against this server; returns stdout (exit code
// in *code).
std::string RunCli(int port, const std::string& args, int* code) {
  const std::string cmd =
      absl::StrCat(CLUSTERKV_CLIENT_BIN, " --server 127.0.0.1:", port, " ",
                   args, " 2>/dev/null");
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST_F(GenerationApiTest, CliTokenizeLogprobsAndSamplingFlags) {
  const Tokenizer& tok = *InProcessModel().tokenizer;
  int code = -1;
  const std::string out =
      RunCli(server_->port(), "tokenize --text 'hello there'", &code);
  ASSERT_EQ(code, 0) << out;
  const auto ids = tok.Encode("hello there", false, true);
  ASSERT_TRUE(ids.ok());
  std::string want;
  for (int32_t id : *ids) absl::StrAppend(&want, want.empty() ? "" : " ", id);
  EXPECT_EQ(out, want + "\n");
  const std::string back = RunCli(server_->port(), "detokenize " + want, &code);
  ASSERT_EQ(code, 0);
  EXPECT_EQ(back, tok.Decode(*ids, false) + "\n");
  RunCli(server_->port(), "detokenize 1,-5", &code);
  EXPECT_EQ(code, 2);  // INVALID_ARGUMENT from the server

  // --logprobs and the sampling flags reach the server: the forced token
  // and one event per token with 3 alternatives.
  const std::string gen = RunCli(
      server_->port(),
      "--json generate --prompt 'a b c' --max-tokens 4 --logprobs 3 "
      "--logit-bias 42=100 --repetition-penalty 1.1 --frequency-penalty 0.1 "
      "--presence-penalty 0.1 --penalty-last-n 8 --min-p 0.01",
      &code);
  ASSERT_EQ(code, 0) << gen;
  const nlohmann::json j = nlohmann::json::parse(gen);
  ASSERT_EQ(j["tokens"].size(), 4u) << gen;
  for (const auto& t : j["tokens"]) {
    EXPECT_EQ(t["id"], 42);
    EXPECT_EQ(t["top_logprobs"].size(), 3u);
  }
  RunCli(server_->port(), "generate --prompt x --min-p 2", &code);
  EXPECT_EQ(code, 2);
  RunCli(server_->port(), "generate --prompt x --logit-bias nope", &code);
  EXPECT_EQ(code, 2);
}

}  // namespace
}  // namespace ckv::server
