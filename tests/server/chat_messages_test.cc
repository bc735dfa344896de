// Chat messages over the wire (docs/wire-contract.md "Chat messages"), on a
// random model with the built-in ChatML template: messages render with the
// model's own template exactly as the text a client could send; a follow-up
// call appends only its new turn, giving the same tokens as a fresh session
// prefilled with the whole rendered conversation; generation stops at
// <|im_end|>; bad messages and a model without a template are refused.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "model/chat/chat_template.h"
#include "server/server_runner.h"
#include "tests/model/test_util.h"
#include "tests/server/small_server_config.h"

namespace ckv::server {
namespace {

namespace v1 = ::clusterkv::v1;
using ::grpc::ClientContext;
using ::grpc::StatusCode;

constexpr int32_t kImStart = 259;  // vocab "byte-chatml"
constexpr int32_t kImEnd = 260;

// The two test models differ only in vocabulary, template and seed.
RandomModelSpec SmallSpec(int seed) {
  RandomModelSpec s;
  s.layers = 2;
  s.dim = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 128;
  s.seed = seed;
  return s;
}

std::string ChatModelPath() {
  RandomModelSpec s = SmallSpec(23);
  s.vocab = "byte-chatml";
  s.chat_template = kChatMlTemplate;
  return ckv::testing::RandomModelPath("chatml", s);
}

std::string PlainModelPath() {
  return ckv::testing::RandomModelPath("nochat", SmallSpec(24));
}

using Turns = std::vector<chat::ChatMessage>;

// The text the server must render: the template with bos "<s>", eos "</s>".
std::string Render(const Turns& turns, bool add_generation_prompt) {
  auto tmpl = chat::ChatTemplate::Parse(kChatMlTemplate);
  EXPECT_TRUE(tmpl.ok()) << tmpl.status();
  chat::ChatRenderOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  auto text = tmpl->Render(turns, o);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.value_or("");
}

void SetMessages(const Turns& turns, std::optional<bool> prompt,
                 v1::ChatMessages* out) {
  for (const auto& t : turns) {
    v1::ChatMessage* m = out->add_messages();
    m->set_role(t.role);
    m->set_content(t.content);
  }
  if (prompt.has_value()) out->set_add_generation_prompt(*prompt);
}

struct Reply {
  std::vector<int32_t> ids;
  grpc::Status status;
  v1::DecodeSummary summary;
};

// Greedy, full attention, at most `n` tokens; no control token and ASCII
// only (so the reply re-tokenizes as itself), unless `end_turn`: then
// <|im_end|> is forced.
v1::SamplingParams Sampling(int n, bool end_turn = false) {
  v1::SamplingParams p;
  p.set_temperature(0.0f);
  p.set_max_tokens(n);
  auto& bias = *p.mutable_logit_bias();
  for (int32_t id : {0, 1, 2, kImStart}) bias[id] = -100.0f;
  for (int32_t b = 0x80; b <= 0xFF; ++b) bias[3 + b] = -100.0f;
  bias[kImEnd] = end_turn ? 100.0f : -100.0f;
  return p;
}

class ChatMessagesTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(testing::SmallServerConfig(ChatModelPath())); }
  void Start(const ServerConfig& c) {
    server_.reset();
    auto s = ClusterKvServer::Start(c, nullptr);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    stub_ = v1::ClusterKv::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                            grpc::InsecureChannelCredentials()));
  }
  std::string Create() {
    ClientContext ctx;
    v1::CreateSessionRequest req;
    req.mutable_kv()->set_policy("full");
    v1::SessionInfo info;
    EXPECT_TRUE(stub_->CreateSession(&ctx, req, &info).ok());
    return info.session_id();
  }
  // Sends `reqs` as one Prefill call.
  grpc::Status Prefill(const std::vector<v1::PrefillRequest>& reqs,
                       v1::PrefillSummary* summary = nullptr) {
    ClientContext ctx;
    auto stream = stub_->Prefill(&ctx);
    for (const auto& r : reqs) stream->Write(r);
    stream->WritesDone();
    v1::PrefillResponse r;
    while (stream->Read(&r)) {
      if (r.has_summary() && summary != nullptr) *summary = r.summary();
    }
    return stream->Finish();
  }
  grpc::Status PrefillText(const std::string& id, const std::string& text,
                           v1::PrefillSummary* summary = nullptr) {
    v1::PrefillRequest req;
    req.set_session_id(id);
    req.set_text(text);
    req.set_add_bos(false);  // the rendered text starts with <s>
    return Prefill({req}, summary);
  }
  grpc::Status PrefillChat(const std::string& id, const Turns& turns,
                           std::optional<bool> prompt,
                           v1::PrefillSummary* summary = nullptr) {
    v1::PrefillRequest req;
    req.set_session_id(id);
    SetMessages(turns, prompt, req.mutable_messages());
    return Prefill({req}, summary);
  }
  Reply Decode(const v1::DecodeRequest& req) {
    ClientContext ctx;
    auto reader = stub_->Decode(&ctx, req);
    return ReadAll(reader.get());
  }
  Reply DecodeChat(const std::string& id, const Turns& turns,
                   const v1::SamplingParams& sampling) {
    v1::DecodeRequest req;
    req.set_session_id(id);
    SetMessages(turns, std::nullopt, req.mutable_messages());
    *req.mutable_sampling() = sampling;
    return Decode(req);
  }
  Reply DecodeOnly(const std::string& id, const v1::SamplingParams& s) {
    v1::DecodeRequest req;
    req.set_session_id(id);
    *req.mutable_sampling() = s;
    return Decode(req);
  }
  static Reply ReadAll(grpc::ClientReader<v1::DecodeResponse>* reader) {
    Reply a;
    v1::DecodeResponse r;
    while (reader->Read(&r)) {
      if (r.has_token() && r.token().id() >= 0) {
        a.ids.push_back(r.token().id());
      } else if (r.has_summary()) {
        a.summary = r.summary();
      }
    }
    a.status = reader->Finish();
    return a;
  }
  std::vector<int32_t> Tokenize(const std::string& text) {
    ClientContext ctx;
    v1::TokenizeRequest req;
    req.set_text(text);
    req.set_add_special(false);
    v1::TokenizeResponse resp;
    EXPECT_TRUE(stub_->Tokenize(&ctx, req, &resp).ok());
    return {resp.ids().begin(), resp.ids().end()};
  }
  std::string Detokenize(const std::vector<int32_t>& ids) {
    ClientContext ctx;
    v1::DetokenizeRequest req;
    req.mutable_ids()->Add(ids.begin(), ids.end());
    req.set_render_special(true);
    v1::DetokenizeResponse resp;
    EXPECT_TRUE(stub_->Detokenize(&ctx, req, &resp).ok());
    return resp.text();
  }

  // A conversation of two questions about a document; the first reply is
  // ASCII text (max_tokens) or an immediate <|im_end|> (end_turn). The
  // follow-up sends only the new user turn and must equal a fresh session
  // prefilled with the whole rendered conversation.
  void CheckFollowUpMatchesFresh(bool end_turn);

  // After kDoc, question q1 answered by `reply` and question q2 answered by
  // r2 (4 tokens): the session held what a fresh session prefilled with
  // the rendered conversation holds, and went on as that session does.
  void ExpectSecondTurnMatchesFresh(const Turns& q1,
                                    const std::vector<int32_t>& reply,
                                    const Turns& q2, const Reply& r2);

  std::unique_ptr<ClusterKvServer> server_;
  std::unique_ptr<v1::ClusterKv::Stub> stub_;
};

const Turns kDoc = {{"system", "Answer from the document."},
                    {"user", "Document: clustered keys recall what matters."}};

void ChatMessagesTest::ExpectSecondTurnMatchesFresh(
    const Turns& q1, const std::vector<int32_t>& reply, const Turns& q2,
    const Reply& r2) {
  Turns all = kDoc;
  all.push_back(q1[0]);
  all.push_back({"assistant", Detokenize(reply)});
  all.push_back(q2[0]);
  const std::string b = Create();
  v1::PrefillSummary sb;
  ASSERT_TRUE(PrefillText(b, Render(all, true), &sb).ok());
  EXPECT_EQ(r2.summary.session_tokens() - r2.summary.generated_tokens(),
            sb.session_tokens());
  EXPECT_EQ(DecodeOnly(b, Sampling(4)).ids, r2.ids);
}

TEST_F(ChatMessagesTest, ServerInfoTellsTheModelHasATemplate) {
  ClientContext ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&ctx, {}, &info).ok());
  EXPECT_TRUE(info.has_chat_template());
  EXPECT_GT(info.limits().max_chat_messages(), 0);
}

TEST_F(ChatMessagesTest, PrefillMessagesEqualsTheRenderedText) {
  const Turns turns = {kDoc[0], kDoc[1], {"user", "What is recalled?"}};
  const std::string text = Render(turns, /*add_generation_prompt=*/true);
  const std::vector<int32_t> ids = Tokenize(text);
  ASSERT_EQ(ids.front(), 1) << "the template writes BOS";
  ASSERT_EQ(ids.back(), 3 + '\n') << "ends with '<|im_start|>assistant\\n'";

  const std::string a = Create(), b = Create();
  v1::PrefillSummary sa, sb;
  ASSERT_TRUE(PrefillChat(a, turns, std::nullopt, &sa).ok());
  ASSERT_TRUE(PrefillText(b, text, &sb).ok());
  EXPECT_EQ(sa.prompt_tokens(), static_cast<int64_t>(ids.size()));
  EXPECT_EQ(sa.session_tokens(), sb.session_tokens());
  const Reply ra = DecodeOnly(a, Sampling(8));
  const Reply rb = DecodeOnly(b, Sampling(8));
  ASSERT_TRUE(ra.status.ok()) << ra.status.error_message();
  ASSERT_TRUE(rb.status.ok()) << rb.status.error_message();
  EXPECT_EQ(ra.ids, rb.ids);
  EXPECT_EQ(ra.ids.size(), 8u);

  // add_generation_prompt = false: no assistant opening.
  const std::string c = Create();
  v1::PrefillSummary sc;
  ASSERT_TRUE(PrefillChat(c, turns, false, &sc).ok());
  EXPECT_EQ(sc.prompt_tokens(),
            static_cast<int64_t>(Tokenize(Render(turns, false)).size()));

  // Generate renders the same way.
  v1::GenerateRequest g1, g2;
  SetMessages(turns, std::nullopt, g1.mutable_messages());
  g2.set_prompt(text);
  g2.set_add_bos(false);
  for (auto* g : {&g1, &g2}) {
    g->mutable_kv()->set_policy("full");
    *g->mutable_sampling() = Sampling(8);
  }
  ClientContext c1, c2;
  const Reply r1 = ReadAll(stub_->Generate(&c1, g1).get());
  const Reply r2 = ReadAll(stub_->Generate(&c2, g2).get());
  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message();
  EXPECT_EQ(r1.ids, r2.ids);
  EXPECT_EQ(r1.ids, ra.ids);
}

void ChatMessagesTest::CheckFollowUpMatchesFresh(bool end_turn) {
  const std::string a = Create();
  ASSERT_TRUE(PrefillChat(a, kDoc, false).ok());
  const Turns q1 = {{"user", "What is recalled?"}};
  const Reply r1 = DecodeChat(a, q1, Sampling(6, end_turn));
  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message();
  if (end_turn) {
    EXPECT_EQ(r1.summary.finish_reason(), v1::FINISH_REASON_EOS);
    EXPECT_TRUE(r1.ids.empty());
  } else {
    EXPECT_EQ(r1.summary.finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(r1.ids.size(), 6u);
  }
  Turns all = kDoc;
  all.push_back(q1[0]);
  // Only the new turn went in: its render after the document.
  EXPECT_EQ(r1.summary.input_tokens(),
            static_cast<int64_t>(Tokenize(Render(all, true)).size() -
                                 Tokenize(Render(kDoc, false)).size()));
  all.push_back({"assistant", Detokenize(r1.ids)});
  const Turns q2 = {{"user", "And what is not?"}};
  all.push_back(q2[0]);
  const Reply r2 = DecodeChat(a, q2, Sampling(8));
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message();

  const std::string full = Render(all, true);
  const std::string b = Create();
  v1::PrefillSummary sb;
  ASSERT_TRUE(PrefillText(b, full, &sb).ok());
  EXPECT_EQ(r2.summary.session_tokens() - r2.summary.generated_tokens(),
            sb.session_tokens());
  EXPECT_EQ(sb.session_tokens(), static_cast<int64_t>(Tokenize(full).size()));
  const Reply rb = DecodeOnly(b, Sampling(8));
  ASSERT_TRUE(rb.status.ok()) << rb.status.error_message();
  EXPECT_EQ(r2.ids, rb.ids);
  EXPECT_EQ(r2.ids.size(), 8u);
}

TEST_F(ChatMessagesTest, FollowUpAppendsOnlyTheNewTurn) {
  CheckFollowUpMatchesFresh(/*end_turn=*/false);
}

TEST_F(ChatMessagesTest, StopsAtImEndAndTheTurnContinues) {
  CheckFollowUpMatchesFresh(/*end_turn=*/true);
}

TEST_F(ChatMessagesTest, ADecodeWithoutInputExtendsTheReply) {
  const std::string a = Create();
  ASSERT_TRUE(PrefillChat(a, kDoc, false).ok());
  const Turns q1 = {{"user", "What is recalled?"}};
  const Reply r1 = DecodeChat(a, q1, Sampling(3));
  ASSERT_TRUE(r1.status.ok());
  const Reply r1b = DecodeOnly(a, Sampling(3));  // the same reply, longer
  ASSERT_TRUE(r1b.status.ok());
  const Turns q2 = {{"user", "More?"}};
  const Reply r2 = DecodeChat(a, q2, Sampling(4));
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message();

  std::vector<int32_t> reply = r1.ids;
  reply.insert(reply.end(), r1b.ids.begin(), r1b.ids.end());
  ExpectSecondTurnMatchesFresh(q1, reply, q2, r2);
}

// The conversation is in the session's snapshot: restored after a restart,
// the session takes a follow-up that sends only the new turn, and holds the
// tokens of a fresh session prefilled with the whole conversation.
TEST_F(ChatMessagesTest, RestoredSessionContinuesTheConversation) {
  const std::string dir = ckv::testing::TempPath("chat_snapshots");
  std::filesystem::remove_all(dir);
  ServerConfig config = testing::SmallServerConfig(ChatModelPath());
  config.snapshot_dir = dir;
  Start(config);
  const std::string a = Create();
  ASSERT_TRUE(PrefillChat(a, kDoc, false).ok());
  const Turns q1 = {{"user", "What is recalled?"}};
  const Reply r1 = DecodeChat(a, q1, Sampling(3));
  ASSERT_TRUE(r1.status.ok());
  Start(config);  // the first server drains: its idle session is written
  ASSERT_TRUE(std::filesystem::exists(dir));
  const Turns q2 = {{"user", "More?"}};
  const Reply r2 = DecodeChat(a, q2, Sampling(4));
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message();

  ExpectSecondTurnMatchesFresh(q1, r1.ids, q2, r2);
  server_.reset();
  std::filesystem::remove_all(dir);
}

TEST_F(ChatMessagesTest, RawInputEndsTheConversation) {
  const std::string a = Create();
  ASSERT_TRUE(PrefillChat(a, kDoc, false).ok());
  v1::DecodeRequest raw;
  raw.set_session_id(a);
  raw.set_text("raw question");
  *raw.mutable_sampling() = Sampling(2);
  ASSERT_TRUE(Decode(raw).status.ok());
  const Reply r = DecodeChat(a, {{"user", "q"}}, Sampling(2));
  EXPECT_EQ(r.status.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(r.status.error_message().find("not sent as chat messages"),
            std::string::npos)
      << r.status.error_message();
  // A session prefilled with text is refused the same way.
  const std::string b = Create();
  ASSERT_TRUE(PrefillText(b, "plain document").ok());
  EXPECT_EQ(PrefillChat(b, kDoc, true).error_code(),
            StatusCode::FAILED_PRECONDITION);
}

TEST_F(ChatMessagesTest, BadMessagesAreInvalidArgument) {
  const std::string a = Create();
  EXPECT_EQ(PrefillChat(a, {{"", "no role"}}, true).error_code(),
            StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(PrefillChat(a, {{"user", "bad \xC3\x28 utf-8"}}, true).error_code(),
            StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(PrefillChat(a, {{"us\xFF", "x"}}, true).error_code(),
            StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(PrefillChat(a, {}, true).error_code(),
            StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(DecodeChat(a, {{"", "x"}}, Sampling(2)).status.error_code(),
            StatusCode::INVALID_ARGUMENT);
  // Messages only in the first message of a Prefill call.
  v1::PrefillRequest first, second;
  first.set_session_id(a);
  SetMessages(kDoc, true, first.mutable_messages());
  second.set_text("more");
  EXPECT_EQ(Prefill({first, second}).error_code(),
            StatusCode::INVALID_ARGUMENT);
  second.clear_text();
  SetMessages(kDoc, true, second.mutable_messages());
  v1::PrefillRequest text_first;
  text_first.set_session_id(a);
  text_first.set_text("doc");
  EXPECT_EQ(Prefill({text_first, second}).error_code(),
            StatusCode::INVALID_ARGUMENT);
  // Nothing of the refused calls went in.
  EXPECT_TRUE(PrefillChat(a, kDoc, true).ok());
}

TEST_F(ChatMessagesTest, TooManyMessagesIsResourceExhausted) {
  ServerConfig c = testing::SmallServerConfig(ChatModelPath());
  c.limits.max_chat_messages = 2;
  Start(c);
  const std::string a = Create();
  const grpc::Status s = PrefillChat(a, {kDoc[0], kDoc[1], kDoc[1]}, true);
  EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("max_chat_messages"), std::string::npos);
  EXPECT_TRUE(PrefillChat(a, kDoc, true).ok());
}

TEST_F(ChatMessagesTest, ModelWithoutTemplateIsFailedPrecondition) {
  Start(testing::SmallServerConfig(PlainModelPath()));
  ClientContext ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&ctx, {}, &info).ok());
  EXPECT_FALSE(info.has_chat_template());
  const std::string a = Create();
  const grpc::Status p = PrefillChat(a, kDoc, true);
  EXPECT_EQ(p.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(p.error_message(), "model has no chat template; send text");
  EXPECT_EQ(DecodeChat(a, kDoc, Sampling(2)).status.error_code(),
            StatusCode::FAILED_PRECONDITION);
  v1::GenerateRequest g;
  SetMessages(kDoc, true, g.mutable_messages());
  ClientContext gc;
  EXPECT_EQ(ReadAll(stub_->Generate(&gc, g).get()).status.error_code(),
            StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace ckv::server
