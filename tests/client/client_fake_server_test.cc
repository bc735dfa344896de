// Runs the clusterkv binary against a small fake ClusterKv server (canned
// responses, ephemeral port): labelled concurrent qa answers, --json
// documents, session metadata, health and error exit codes.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "clusterkv/v1/clusterkv.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

namespace pb = ::clusterkv::v1;
using grpc::ServerContext;
using grpc::Status;

// Answer pieces: ASCII, a multi-byte character and a newline.
std::vector<std::string> AnswerPieces(const std::string& question) {
  return {"Re: ", question, " caf\xC3\xA9", "\nbye \xE2\x82\xAC"};
}

std::string Joined(const std::vector<std::string>& pieces) {
  std::string s;
  for (const std::string& p : pieces) s += p;
  return s;
}

std::string NoNewlines(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '\n'), s.end());
  return s;
}

class FakeService final : public pb::ClusterKv::Service {
 public:
  Status CreateSession(ServerContext*, const pb::CreateSessionRequest*,
                       pb::SessionInfo* info) override {
    info->set_session_id(NewId());
    return Status::OK;
  }

  Status Prefill(
      ServerContext* ctx,
      grpc::ServerReaderWriter<pb::PrefillResponse, pb::PrefillRequest>* stream)
      override {
    pb::PrefillRequest request;
    std::string text, id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      prefill_messages_.Clear();
    }
    while (stream->Read(&request)) {
      if (id.empty()) id = request.session_id();
      text += request.text();
      if (request.has_messages()) {
        std::lock_guard<std::mutex> lock(mu_);
        prefill_messages_ = request.messages();
        text += request.messages().messages(0).content();
      }
    }
    Record("Prefill", ctx, id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      prefill_text_ = text;
    }
    const int64_t n = static_cast<int64_t>(text.size());
    pb::PrefillResponse r;
    for (int64_t done : {n / 2, n}) {
      r.mutable_progress()->set_tokens_done(done);
      r.mutable_progress()->set_tokens_total(n);
      stream->Write(r);
    }
    pb::PrefillSummary* s = r.mutable_summary();
    s->set_prompt_tokens(n);
    s->set_session_tokens(n);
    s->set_segments(1);
    stream->Write(r);
    return Status::OK;
  }

  Status Decode(ServerContext* ctx, const pb::DecodeRequest* request,
                grpc::ServerWriter<pb::DecodeResponse>* writer) override {
    Record("Decode", ctx, request->session_id());
    // The question follows "Question: " in the formatted input.
    // A chat question is the content of its user turn.
    const std::string& in = request->has_messages()
                                ? request->messages().messages(0).content()
                                : request->text();
    const size_t at = in.find("Question: ");
    std::string q = at == std::string::npos ? in : in.substr(at + 10);
    q = q.substr(0, q.find('\n'));
    const auto pieces = AnswerPieces(q);
    pb::DecodeResponse r;
    for (const std::string& p : pieces) {
      r.mutable_token()->set_text(p);
      writer->Write(r);
    }
    pb::DecodeSummary* s = r.mutable_summary();
    s->set_finish_reason(pb::FINISH_REASON_EOS);
    s->set_generated_tokens(static_cast<int64_t>(pieces.size()));
    s->set_text(Joined(pieces));
    writer->Write(r);
    return Status::OK;
  }

  Status Generate(ServerContext*, const pb::GenerateRequest* request,
                  grpc::ServerWriter<pb::DecodeResponse>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      generate_request_ = *request;
    }
    if (request->prompt().empty() && !request->has_messages()) {
      return Status(grpc::StatusCode::INVALID_ARGUMENT, "empty prompt");
    }
    pb::DecodeResponse r;
    for (const char* p : {"hello", " world"}) {
      r.mutable_token()->set_text(p);
      writer->Write(r);
    }
    r.mutable_summary()->set_finish_reason(pb::FINISH_REASON_LENGTH);
    r.mutable_summary()->set_generated_tokens(2);
    writer->Write(r);
    return Status::OK;
  }

  Status ForkSession(ServerContext* ctx, const pb::ForkSessionRequest* request,
                     pb::SessionInfo* info) override {
    Record("ForkSession", ctx, request->session_id());
    info->set_session_id(NewId());
    info->set_parent_session_id(request->session_id());
    return Status::OK;
  }

  Status GetSession(ServerContext*, const pb::GetSessionRequest* request,
                    pb::SessionInfo*) override {
    return Status(grpc::StatusCode::NOT_FOUND,
                  absl::StrCat("no session '", request->session_id(), "'"));
  }

  Status CloseSession(ServerContext* ctx,
                      const pb::CloseSessionRequest* request,
                      pb::CloseSessionResponse* response) override {
    Record("CloseSession", ctx, request->session_id());
    std::lock_guard<std::mutex> lock(mu_);
    closed_.insert(request->session_id());
    response->set_freed_host_bytes(4096);
    return Status::OK;
  }

  Status GetServerInfo(ServerContext*, const pb::GetServerInfoRequest*,
                       pb::ServerInfo* info) override {
    info->mutable_model()->set_name("fake-model");
    info->set_backend("cpu");
    info->mutable_limits()->set_max_host_kv_bytes(int64_t{1} << 34);
    info->set_has_chat_template(chat_template_.load());
    return Status::OK;
  }

  // (rpc, x-session-id metadata, session id in the request)
  struct Call {
    std::string rpc, metadata, session_id;
  };
  std::vector<Call> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::set<std::string> closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  std::string prefill_text() {
    std::lock_guard<std::mutex> lock(mu_);
    return prefill_text_;
  }
  pb::ChatMessages prefill_messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return prefill_messages_;
  }
  pb::GenerateRequest generate_request() {
    std::lock_guard<std::mutex> lock(mu_);
    return generate_request_;
  }
  std::atomic<bool> chat_template_{false};  // ServerInfo.has_chat_template

 private:
  std::string NewId() { return absl::StrCat("s", next_id_++); }

  void Record(const std::string& rpc, ServerContext* ctx,
              const std::string& id) {
    std::string md;
    auto it = ctx->client_metadata().find("x-session-id");
    if (it != ctx->client_metadata().end()) {
      md.assign(it->second.data(), it->second.size());
    }
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({rpc, md, id});
  }

  std::atomic<int> next_id_{1};
  std::mutex mu_;
  std::vector<Call> calls_;
  std::set<std::string> closed_;
  std::string prefill_text_;
  pb::ChatMessages prefill_messages_;
  pb::GenerateRequest generate_request_;
};

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

class ClientFakeServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    dir_ = ::testing::TempDir();
  }
  void TearDown() override { server_->Shutdown(); }

  // Runs clusterkv with `args` (shell-quoted by the caller).
  RunResult Run(const std::string& args) {
    const std::string err_path = absl::StrCat(dir_, "/ckv_err_", getpid());
    const std::string cmd =
        absl::StrCat(CLUSTERKV_CLIENT_BIN, " --server 127.0.0.1:", port_, " ",
                     args, " 2>", err_path);
    RunResult r;
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
    const int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::ifstream in(err_path);
    std::stringstream ss;
    ss << in.rdbuf();
    r.err = ss.str();
    return r;
  }

  // A document of multi-byte text, larger than one 1 KiB chunk.
  std::string WriteDoc() {
    std::string doc;
    for (int i = 0; i < 500; ++i) doc += "na\xC3\xAFve \xF0\x9F\x98\x80 ";
    const std::string path = absl::StrCat(dir_, "/ckv_doc_", getpid());
    std::ofstream(path, std::ios::binary) << doc;
    doc_ = doc;
    return path;
  }

  FakeService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string dir_;
  std::string doc_;
};

TEST_F(ClientFakeServerTest, QaPrintsLabelledAnswers) {
  const std::string doc = WriteDoc();
  RunResult r = Run(absl::StrCat("qa --doc ", doc,
                                 " --question 'Who?' --question 'Why not?'"
                                 " --chunk-kib 1 --progress lines"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(service_.prefill_text(), doc_);
  // Every line is labelled; per label the lines rebuild the answer (minus
  // line breaks: interleaving may also break a line).
  std::map<std::string, std::string> by_label;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (line.empty()) continue;
    ASSERT_TRUE(line.substr(0, 5) == "[q1] " || line.substr(0, 5) == "[q2] ")
        << line;
    by_label[std::string(line.substr(0, 5))] += std::string(line.substr(5));
  }
  EXPECT_EQ(by_label["[q1] "], NoNewlines(Joined(AnswerPieces("Who?"))));
  EXPECT_EQ(by_label["[q2] "], NoNewlines(Joined(AnswerPieces("Why not?"))));
  EXPECT_NE(r.err.find("prefill: 100%"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("finish eos"), std::string::npos) << r.err;
  // Parent s1 and forks s2, s3 all closed; session calls carry the id.
  EXPECT_EQ(service_.closed(), (std::set<std::string>{"s1", "s2", "s3"}));
  int decodes = 0;
  for (const auto& c : service_.calls()) {
    EXPECT_EQ(c.metadata, c.session_id) << c.rpc;
    if (c.rpc == "Decode") ++decodes;
  }
  EXPECT_EQ(decodes, 2);
}

TEST_F(ClientFakeServerTest, QaJsonParses) {
  const std::string doc = WriteDoc();
  RunResult r = Run(absl::StrCat("--json qa --doc ", doc,
                                 " --question A --question B --question C"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["session_id"], "s1");
  EXPECT_EQ(j["prefill"]["prompt_tokens"], doc_.size());
  ASSERT_EQ(j["answers"].size(), 3u);
  EXPECT_EQ(j["answers"][1]["question"], "B");
  EXPECT_EQ(j["answers"][1]["text"], Joined(AnswerPieces("B")));
  EXPECT_EQ(j["answers"][2]["summary"]["finish_reason"], "FINISH_REASON_EOS");
  EXPECT_TRUE(j["sessions_closed"].get<bool>());
}

// With a chat template: the document is the first turn (no assistant
// opening), each question a user turn; --raw sends text as before.
TEST_F(ClientFakeServerTest, QaSendsMessagesWhenTheModelHasATemplate) {
  service_.chat_template_ = true;
  const std::string doc = WriteDoc();
  RunResult r = Run(absl::StrCat("--json qa --doc ", doc,
                                 " --doc-role system --question Who?"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const pb::ChatMessages m = service_.prefill_messages();
  ASSERT_EQ(m.messages_size(), 1);
  EXPECT_EQ(m.messages(0).role(), "system");
  EXPECT_EQ(m.messages(0).content(), doc_);
  ASSERT_TRUE(m.has_add_generation_prompt());
  EXPECT_FALSE(m.add_generation_prompt());
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["chat_template"].get<bool>());
  EXPECT_EQ(j["answers"][0]["text"], Joined(AnswerPieces("Who?")));

  RunResult raw =
      Run(absl::StrCat("--json qa --raw --doc ", doc, " --question Who?"));
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  EXPECT_FALSE(nlohmann::json::parse(raw.out)["chat_template"].get<bool>());
  EXPECT_EQ(service_.prefill_text(), doc_);
  EXPECT_EQ(service_.prefill_messages().messages_size(), 0);
  EXPECT_EQ(Run(absl::StrCat("qa --doc-role tool --doc ", doc, " --question Q"))
                .exit_code,
            2);
}

// generate, like qa: the prompt as one user turn (with the assistant's
// opening) when the model has a template; --raw sends the text as is.
TEST_F(ClientFakeServerTest, GenerateSendsAUserTurnWhenTheModelHasATemplate) {
  service_.chat_template_ = true;
  ASSERT_EQ(Run("generate --prompt 'Who are you?'").exit_code, 0);
  const pb::GenerateRequest chat = service_.generate_request();
  ASSERT_TRUE(chat.has_messages());
  ASSERT_EQ(chat.messages().messages_size(), 1);
  EXPECT_EQ(chat.messages().messages(0).role(), "user");
  EXPECT_EQ(chat.messages().messages(0).content(), "Who are you?");
  EXPECT_FALSE(chat.messages().has_add_generation_prompt());  // default true
  ASSERT_EQ(Run("generate --raw --prompt 'Who are you?'").exit_code, 0);
  EXPECT_FALSE(service_.generate_request().has_messages());
  EXPECT_EQ(service_.generate_request().prompt(), "Who are you?");
  service_.chat_template_ = false;
  ASSERT_EQ(Run("generate --prompt hi").exit_code, 0);
  EXPECT_EQ(service_.generate_request().prompt(), "hi");
}

TEST_F(ClientFakeServerTest, GenerateAndInfoJson) {
  RunResult g = Run("--json generate --prompt hi --max-tokens 2");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(nlohmann::json::parse(g.out)["text"], "hello world");
  RunResult h = Run("generate --prompt hi");
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_EQ(h.out, "hello world\n");
  EXPECT_NE(h.err.find("finish length"), std::string::npos) << h.err;
  RunResult i = Run("--json info");
  ASSERT_EQ(i.exit_code, 0) << i.err;
  const nlohmann::json j = nlohmann::json::parse(i.out);
  EXPECT_EQ(j["model"]["name"], "fake-model");
  EXPECT_EQ(j["limits"]["max_host_kv_bytes"], int64_t{1} << 34);
}

TEST_F(ClientFakeServerTest, SessionCommands) {
  RunResult c = Run("session create --policy clusterkv");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, "s1\n");
  RunResult p = Run("session prefill s1 --text 'some text'");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(service_.prefill_text(), "some text");
  RunResult a = Run("--json session ask s1 --question Q1");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["text"], Joined(AnswerPieces("Q1")));
  RunResult f = Run("session fork s1");
  EXPECT_EQ(f.out, "s2\n");
  RunResult x = Run("session close s2");
  ASSERT_EQ(x.exit_code, 0) << x.err;
  EXPECT_EQ(service_.closed(), std::set<std::string>{"s2"});
}

TEST_F(ClientFakeServerTest, HealthAndErrors) {
  RunResult h = Run("health");
  EXPECT_EQ(h.exit_code, 0) << h.err;
  EXPECT_EQ(h.out, "SERVING\n");
  RunResult nf = Run("session info nope");
  EXPECT_EQ(nf.exit_code, 1);
  EXPECT_EQ(nf.err, "error: NOT_FOUND: no session 'nope'\n");
  RunResult bad = Run("session prefill s1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err.rfind("error: INVALID_ARGUMENT: ", 0), 0u) << bad.err;
  RunResult srv = Run("generate --prompt ''");
  EXPECT_EQ(srv.exit_code, 2) << srv.err;
  EXPECT_EQ(Run("frobnicate").exit_code, 2);
}

}  // namespace
