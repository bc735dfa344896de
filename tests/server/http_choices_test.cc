// n > 1 on the HTTP API (docs/http-api.md, "Several choices"): the prompt
// prefilled once and forked per choice, each with its own index, seed,
// log-probabilities and finish reason, streamed interleaved; usage counts
// the prompt once; the cap and session rules; a client gone cancels every
// choice.
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_json.h"
#include "server/server_runner.h"
#include "server/service_state.h"
#include "tests/model/test_util.h"
#include "tests/server/http_api_fixture.h"
#include "tests/server/small_server_config.h"

namespace ckv::server::http {
namespace {

using Json = nlohmann::json;

TEST(OpenAiJsonTest, ReadsNAndMergesChoices) {
  auto r =
      ParseOpenAiRequest(R"({"prompt": "a", "n": 3})", Endpoint::kCompletions);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(ParseOpenAiRequest(R"({"prompt": "a"})", Endpoint::kCompletions)->n,
            1);
  ResponseHead head{Endpoint::kCompletions, "cmpl-1", 1, "m"};
  ChoiceOptions second;
  second.index = 1;
  std::vector<TokenPiece> a(1), b(1);
  a[0].text = "x";
  b[0].text = "y";
  const Json merged = Json::parse(
      MergeChoices({CompletionBody(head, a, "stop", {3, 2, 0}, {}),
                    CompletionBody(head, b, "length", {3, 2, 0}, second)}));
  ASSERT_EQ(merged["choices"].size(), 2u);
  EXPECT_EQ(merged["choices"][1]["index"], 1);
  EXPECT_EQ(merged["choices"][1]["text"], "y");
  EXPECT_EQ(merged["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(merged["usage"]["prompt_tokens"], 3);
  const Json chunk = Json::parse(ChunkBody(head, b, true, second));
  EXPECT_EQ(chunk["choices"][0]["index"], 1);
}

// The data lines of an SSE body, [DONE] checked and dropped.
std::vector<Json> Events(const std::string& body) {
  std::vector<std::string> events =
      absl::StrSplit(body, "\n\n", absl::SkipEmpty());
  EXPECT_FALSE(events.empty());
  if (events.empty()) return {};
  EXPECT_EQ(events.back(), "data: [DONE]");
  events.pop_back();
  std::vector<Json> out;
  for (const std::string& e : events) {
    EXPECT_TRUE(absl::StartsWith(e, "data: ")) << e;
    out.push_back(Json::parse(e.substr(6)));
  }
  return out;
}

class HttpChoicesTest : public HttpApiTest {
 public:
  using HttpApiTest::Post;
};

int64_t PromptTokens(HttpChoicesTest& t, const std::string& body) {
  auto one = t.Post("/v1/completions", body);
  EXPECT_TRUE(one && one->status == 200) << (one ? one->body : "no answer");
  if (!one || one->status != 200) return -1;
  return Json::parse(one->body)["usage"]["prompt_tokens"].get<int64_t>();
}

// clusterkv_requests_total of http.Completions with gRPC code `code`.
int64_t CompletionRequests(const ServerMetrics& m, absl::string_view code) {
  int64_t total = 0;
  for (absl::string_view line : absl::StrSplit(m.Serialize(), '\n')) {
    if (!absl::StartsWith(line, "clusterkv_requests_total{") ||
        !absl::StrContains(line, absl::StrCat("\"", code, "\"")) ||
        !absl::StrContains(line, "http.Completions")) {
      continue;
    }
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) {
      total += static_cast<int64_t>(v);
    }
  }
  return total;
}

// Completions, n = 3, sampled with a seed: three choices (indices 0..2),
// each with its finish reason and log-probabilities; usage counts the
// prompt once and the choices' tokens summed; the request is one request in
// clusterkv_requests_total (one log line); choice i is what n = 1 with
// seed + i answers, and the whole answer repeats.
TEST_F(HttpChoicesTest, CompletionChoicesAreSeededAndCountedOnce) {
  const std::string prompt = "Several roads lead";
  auto body = [&](int n, int seed) {
    return Json{{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 1.0},
                {"seed", seed},     {"n", n},          {"logprobs", 1}}
        .dump();
  };
  const int64_t ok_before = CompletionRequests(*metrics_, "OK");
  auto res = Post("/v1/completions", body(3, 7));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(CompletionRequests(*metrics_, "OK"), ok_before + 1);
  const Json j = Json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 3u) << res->body;
  int64_t tokens = 0;
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    const Json& c = j["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_TRUE(c["finish_reason"] == "length" || c["finish_reason"] == "stop")
        << c;
    ASSERT_TRUE(c["logprobs"].is_object()) << c;
    tokens += static_cast<int64_t>(c["logprobs"]["tokens"].size());
    texts.insert(c["text"].get<std::string>());
  }
  EXPECT_GE(texts.size(), 2u) << "three seeds, one text: " << res->body;
  EXPECT_EQ(j["usage"]["completion_tokens"], tokens);
  const int64_t prompt_tokens = PromptTokens(*this, body(1, 7));
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(j["usage"]["total_tokens"], prompt_tokens + tokens);
  for (int i = 0; i < 3; ++i) {
    auto one = Post("/v1/completions", body(1, 7 + i));
    ASSERT_TRUE(one && one->status == 200);
    EXPECT_EQ(Json::parse(one->body)["choices"][0]["text"],
              j["choices"][i]["text"])
        << "choice " << i;
  }
  auto again = Post("/v1/completions", body(3, 7));
  ASSERT_TRUE(again && again->status == 200);
  const Json k = Json::parse(again->body);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(k["choices"][i]["text"], j["choices"][i]["text"]);
  }
}

// Streaming chat, n = 3: every index has its role, content and exactly one
// finish reason, the usage chunk counts the prompt once, and each choice's
// text is the non-streamed answer's.
TEST_F(HttpChoicesTest, StreamedChatChoicesInterleave) {
  Json body{{"messages", {{{"role", "user"}, {"content", "Pick a number"}}}},
            {"max_tokens", 6},
            {"temperature", 1.0},
            {"seed", 3},
            {"n", 3},
            {"logprobs", true}};
  auto whole = Post("/v1/chat/completions", body.dump());
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const Json w = Json::parse(whole->body);
  ASSERT_EQ(w["choices"].size(), 3u);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto res = Post("/v1/chat/completions", body.dump());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::map<int, std::string> text;
  std::map<int, int> finishes, roles, tokens;
  Json usage;
  for (const Json& e : Events(res->body)) {
    if (e["choices"].empty()) {
      usage = e["usage"];
      continue;
    }
    ASSERT_EQ(e["choices"].size(), 1u);
    const Json& c = e["choices"][0];
    const int i = c["index"];
    if (c["delta"].contains("role")) ++roles[i];
    if (c["delta"].contains("content")) text[i] += c["delta"]["content"];
    if (c["logprobs"].is_object()) tokens[i] += c["logprobs"]["content"].size();
    if (!c["finish_reason"].is_null()) {
      EXPECT_EQ(finishes[i], 0) << "index " << i << " finished twice";
      ++finishes[i];
    }
  }
  ASSERT_FALSE(usage.is_null()) << res->body;
  int64_t sum = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(roles[i], 1) << "index " << i;
    EXPECT_EQ(finishes[i], 1) << "index " << i;
    EXPECT_EQ(text[i], w["choices"][i]["message"]["content"]) << "index " << i;
    sum += tokens[i];
  }
  EXPECT_EQ(usage["completion_tokens"], sum);
  EXPECT_EQ(usage["completion_tokens"], w["usage"]["completion_tokens"]);
  EXPECT_EQ(usage["prompt_tokens"], w["usage"]["prompt_tokens"]);
  body["n"] = 1;
  body.erase("stream");
  body.erase("stream_options");
  auto one = Post("/v1/chat/completions", body.dump());
  ASSERT_TRUE(one && one->status == 200);
  EXPECT_EQ(Json::parse(one->body)["usage"]["prompt_tokens"],
            usage["prompt_tokens"]);
}

TEST_F(HttpChoicesTest, NOutsideTheRulesIs400) {
  const std::string over = R"({"prompt": "a", "n": 17})";
  const Json e = ErrorOf(Post("/v1/completions", over), 400);
  EXPECT_EQ(e["param"], "n");
  EXPECT_TRUE(absl::StrContains(e["message"].get<std::string>(), "16"));
  EXPECT_EQ(ErrorOf(Post("/v1/completions", R"({"prompt": "a", "n": 0})"),
                    400)["param"],
            "n");
  const Json s = ErrorOf(Post("/v1/completions", R"({"prompt": "a", "n": 2})",
                              {{"x-session-id", "new"}}),
                         400);
  EXPECT_EQ(s["param"], "n");
  EXPECT_TRUE(absl::StrContains(s["message"].get<std::string>(), "one-shot"));
  // No session was left behind by the refusals.
  EXPECT_TRUE(server_->state().Backend()->sessions->List().empty());
}

// Admission counts n sequences: with max_sessions 4, n = 5 can never fit
// (400, param n); with two sessions held, n = 3 (the prompt's session and
// two forks) finds the server full (429 max_sessions, Retry-After), and
// fits once one is closed, every session and reservation released after.
TEST(HttpChoicesLimitsTest, AdmissionCountsEveryChoice) {
  ServerConfig c = testing::SmallServerConfig(
      ckv::testing::RandomModelPath("http_n", Spec()));
  c.http_listen_address = "127.0.0.1:0";
  c.limits.max_sessions = 4;
  auto server = ClusterKvServer::Start(c, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  auto port = StartHttpApi(**server);
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client client("127.0.0.1", *port);
  auto post = [&](int n, const httplib::Headers& h = {}) {
    return client.Post(
        "/v1/completions", h,
        Json{{"prompt", "Count"}, {"max_tokens", 4}, {"n", n}}.dump(),
        "application/json");
  };
  auto never = post(5);
  ASSERT_TRUE(never);
  EXPECT_EQ(never->status, 400) << never->body;
  EXPECT_EQ(Json::parse(never->body)["error"]["param"], "n");
  EXPECT_FALSE(never->has_header("Retry-After"));
  std::vector<std::string> held;
  for (int i = 0; i < 2; ++i) {
    auto r = client.Post("/v1/completions", {{"x-session-id", "new"}},
                         R"({"prompt": "hold", "max_tokens": 1})",
                         "application/json");
    ASSERT_TRUE(r && r->status == 200);
    held.push_back(r->get_header_value("x-session-id"));
  }
  auto full = post(3);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 429) << full->body;
  EXPECT_EQ(Json::parse(full->body)["error"]["code"], "max_sessions");
  EXPECT_TRUE(full->has_header("Retry-After"));
  // The refused request left nothing behind: two held sessions only.
  EXPECT_EQ((*server)->state().Backend()->sessions->List().size(), 2u);
  ASSERT_TRUE((*server)->state().Backend()->sessions->Close(held[0]).ok());
  auto fits = post(3);
  ASSERT_TRUE(fits);
  ASSERT_EQ(fits->status, 200) << fits->body;
  EXPECT_EQ(Json::parse(fits->body)["choices"].size(), 3u);
  EXPECT_EQ((*server)->state().Backend()->sessions->List().size(), 1u);
  EXPECT_EQ(
      (*server)->state().Backend()->admission->stats().reserved_host_bytes, 0);
}

// A client that reads the first chunk of a streamed n = 3 answer and goes
// away: all three choices are cancelled and their sessions closed; the
// request counts once, as cancelled.
TEST_F(HttpChoicesTest, DisconnectCancelsEveryChoice) {
  // Greedy (the server's default) runs to the length on this model.
  Json body{{"prompt", "Go on and on"}, {"max_tokens", 40}};
  auto probe = Post("/v1/completions", body.dump());
  ASSERT_TRUE(probe && probe->status == 200);
  ASSERT_EQ(Json::parse(probe->body)["choices"][0]["finish_reason"], "length")
      << probe->body;
  body["max_tokens"] = 1500;
  body["n"] = 3;
  body["stream"] = true;
  const int64_t before = CompletionRequests(*metrics_, "CANCELLED");
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Authorization", std::string("Bearer ") + kToken},
                 {"Content-Type", "application/json"}};
  req.body = body.dump();
  std::string got;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    got.append(data, n);
    return !absl::StrContains(got, "\"index\":2");  // all three running
  };
  auto res = client_->send(req);
  EXPECT_FALSE(res);  // the client gave up
  ASSERT_TRUE(absl::StrContains(got, "\"index\":2")) << got;
  client_->stop();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline &&
         (CompletionRequests(*metrics_, "CANCELLED") < before + 1 ||
          !server_->state().Backend()->sessions->List().empty())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(CompletionRequests(*metrics_, "CANCELLED"), before + 1);
  EXPECT_TRUE(server_->state().Backend()->sessions->List().empty());
}

}  // namespace
}  // namespace ckv::server::http
