// The OpenAI-compatible HTTP API (server/http/): request parsing and error
// bodies on strings, chat rendering with a real model's template, and a
// server started in this process (random model, bearer tokens) called with
// cpp-httplib's client over loopback. Also the status page: the history
// ring buffer, GET /v1/status and GET /.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "server/http/http_server.h"
#include "server/http/openai_frontend.h"
#include "server/http/openai_json.h"
#include "server/metrics.h"
#include "server/server_runner.h"
#include "server/service_convert.h"
#include "server/service_state.h"
#include "server/status.h"
#include "tests/model/test_util.h"
#include "tests/server/http_api_fixture.h"
#include "tests/server/small_server_config.h"

namespace ckv::server::http {
namespace {

using Json = nlohmann::json;

// ---- request parsing and bodies ---------------------------------------------

absl::StatusCode ParseCode(const std::string& body,
                           Endpoint e = Endpoint::kCompletions) {
  return ParseOpenAiRequest(body, e).status().code();
}

TEST(OpenAiJsonTest, RefusesMalformedBodies) {
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(ParseCode("{"), kBad);
  EXPECT_EQ(ParseCode(""), kBad);
  EXPECT_EQ(ParseCode("[1]"), kBad);
  EXPECT_EQ(ParseCode("{\"prompt\": \"\xff\xfe\"}"), kBad);  // bad UTF-8
  EXPECT_EQ(ParseCode(std::string(100000, '[') + std::string(100000, ']')),
            kBad);
  EXPECT_EQ(ParseCode("{}"), kBad);  // no prompt
  EXPECT_EQ(ParseCode("{\"prompt\": \"a\", \"n\": 0}"), kBad);
  EXPECT_EQ(ParseCode("{\"prompt\": \"a\", \"n\": 1.5}"), kBad);
  EXPECT_EQ(ParseCode("{\"prompt\": [\"a\", \"b\"]}"), kBad);
  EXPECT_EQ(ParseCode("{\"prompt\": \"a\", \"max_tokens\": 0}"), kBad);
  EXPECT_EQ(ParseCode("{\"prompt\": \"a\", \"temperature\": \"hot\"}"), kBad);
  EXPECT_EQ(ParseCode("{\"prompt\": \"a\", \"top_p\": 1.5}"), kBad);
  EXPECT_EQ(ParseCode("{\"prompt\": \"a\", \"stop\": 3}"), kBad);
  EXPECT_EQ(ParseCode("{\"messages\": []}", Endpoint::kChat), kBad);
  EXPECT_EQ(
      ParseCode("{\"messages\": [{\"content\": \"x\"}]}", Endpoint::kChat),
      kBad);
}

TEST(OpenAiJsonTest, ErrorBodyHasOpenAiShapeAndNamesTheField) {
  auto r = ParseOpenAiRequest("{\"prompt\": \"a\", \"n\": -3}",
                              Endpoint::kCompletions);
  ASSERT_FALSE(r.ok());
  const Json e = Json::parse(ErrorBody(r.status()))["error"];
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "n");
  EXPECT_EQ(e["code"], "invalid_argument");
  EXPECT_TRUE(absl::StrContains(e["message"].get<std::string>(), "'n'"));
  EXPECT_TRUE(Json::parse(ErrorBody(absl::NotFoundError("x")))["error"]["param"]
                  .is_null());
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnauthenticated), 401);
}

TEST(OpenAiJsonTest, ReadsPromptFormsAndSampling) {
  auto r = ParseOpenAiRequest(
      R"({"prompt": ["hello"], "stop": "x", "max_tokens": 7, "seed": 5,
          "temperature": 0.5, "top_p": 0.9, "n": 1, "logprobs": null,
          "stream": true, "stream_options": {"include_usage": true}})",
      Endpoint::kCompletions);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt, "hello");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  const SamplingParams s = ApplySampling(SamplingParams(), *r);
  EXPECT_EQ(s.max_tokens, 7);
  EXPECT_EQ(s.seed, 5u);
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.stop, std::vector<std::string>{"x"});
  auto ids = ParseOpenAiRequest(R"({"prompt": [1, 2, 3], "stop": ["a", "b"]})",
                                Endpoint::kCompletions);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_TRUE(ids->has_prompt_ids);
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids->stop->size(), 2u);
}

TEST(OpenAiJsonTest, ChatContentPartsAndRawRendering) {
  auto r = ParseOpenAiRequest(
      R"({"messages": [{"role": "system", "content": "be brief"},
          {"role": "user", "content": [{"type": "text", "text": "hi "},
                                       {"type": "text", "text": "there"}]}]})",
      Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(RenderRawConversation(r->messages),
            "system: be brief\nuser: hi there\nassistant:");
}

TEST(OpenAiJsonTest, ChunksHaveOpenAiObjects) {
  ResponseHead head{Endpoint::kChat, "chatcmpl-1", 42, "m"};
  const Json first = Json::parse(ChunkBody(head, "Hi", /*first=*/true));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "Hi");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const Json last = Json::parse(ChunkBody(head, "", false, "length"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("content"));
  const Json usage = Json::parse(UsageChunkBody(head, {3, 4}));
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  EXPECT_TRUE(usage["choices"].empty());
}

// The model's own tokenizer.chat_template (Qwen2's ChatML) renders the
// conversation with the generation prompt.
TEST(OpenAiFrontendTest, RendersTheModelChatTemplate) {
  const std::string vocab =
      ckv::testing::FixturesDir() + "/tokenizer/ggml-vocab-qwen2.gguf";
  auto file = gguf::GgufFile::Open(vocab);
  ASSERT_TRUE(file.ok()) << file.status();
  Model model;
  model.tokenizer = *Tokenizer::FromGguf(**file);
  model.file = *std::move(file);
  ServerConfig config;
  ServiceState state(config, nullptr);
  state.SetBackend({&model, nullptr, nullptr, nullptr, nullptr});
  OpenAiFrontend frontend(state);
  ASSERT_TRUE(frontend.has_chat_template());
  OpenAiRequest r;
  r.endpoint = Endpoint::kChat;
  r.messages.emplace_back();
  r.messages[0].role = "user";
  r.messages[0].content = "hi";
  auto text = frontend.RenderChat(r);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(HttpApiTest, ErrorsHaveOpenAiShapeAndStatus) {
  auto no_token = client_->Get("/v1/models");
  EXPECT_EQ(ErrorOf(no_token, 401)["type"], "authentication_error");
  httplib::Headers bad{{"Authorization", "Bearer wrong"}};
  EXPECT_EQ(
      ErrorOf(client_->Post("/v1/completions", bad, "{}", "application/json"),
              401)["message"],
      "unknown bearer token");
  EXPECT_EQ(ErrorOf(Post("/v1/completions", "{not json"), 400)["type"],
            "invalid_request_error");
  EXPECT_EQ(ErrorOf(Post("/v1/completions", "{\"prompt\": \"\xc3\x28\"}"),
                    400)["type"],
            "invalid_request_error");
  EXPECT_EQ(ErrorOf(Post("/v1/chat/completions",
                         R"({"messages": [{"role": "user", "content": "x"}],
                             "n": 0})"),
                    400)["param"],
            "n");
  EXPECT_EQ(ErrorOf(Post("/v1/completions", R"({"prompt": "hello"})",
                         {{"x-session-id", "s-0123456789abcdef"}}),
                    404)["type"],
            "not_found_error");
  EXPECT_EQ(ErrorOf(Post("/v1/completions",
                         R"({"prompt": "hello", "model": "other"})"),
                    404)["type"],
            "not_found_error");
  EXPECT_EQ(ErrorOf(Post("/v1/nothing", "{}"), 404)["type"], "not_found_error");
  const std::string big(2000, 'a');  // > max_prompt_tokens (byte vocab)
  // A prompt over the limit can never succeed: 400 naming the field.
  const Json too_big =
      ErrorOf(Post("/v1/completions", Json{{"prompt", big}}.dump()), 400);
  EXPECT_EQ(too_big["code"], "max_prompt_tokens");
  EXPECT_EQ(too_big["param"], "prompt");
}

TEST_F(HttpApiTest, ListsTheModel) {
  auto res = client_->Get("/v1/models",
                          {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json j = Json::parse(res->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_FALSE(j["data"][0]["id"].get<std::string>().empty());
}

TEST_F(HttpApiTest, CompletionCountsUsageAndStreamsTheSameText) {
  const std::string prompt = "The quick brown fox";
  auto res = Post("/v1/completions",
                  Json{{"prompt", prompt}, {"max_tokens", 6}}.dump());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_FALSE(res->has_header("x-session-id"));  // one-shot
  const Json j = Json::parse(res->body);
  EXPECT_EQ(j["object"], "text_completion");
  auto model = LoadModel(model_path_);
  ASSERT_TRUE(model.ok());
  auto ids = EncodeText(*(*model)->tokenizer, prompt, /*add_bos=*/true);
  ASSERT_TRUE(ids.ok());
  const Json& usage = j["usage"];
  EXPECT_EQ(usage["prompt_tokens"], static_cast<int64_t>(ids->size()));
  const int64_t completion = usage["completion_tokens"];
  const std::string finish = j["choices"][0]["finish_reason"];
  if (finish == "length") {
    EXPECT_EQ(completion, 6);
  } else {
    EXPECT_EQ(finish, "stop");
    EXPECT_LT(completion, 6);
  }
  EXPECT_EQ(usage["total_tokens"],
            usage["prompt_tokens"].get<int64_t>() + completion);

  auto stream = Post(
      "/v1/completions",
      Json{{"prompt", prompt}, {"max_tokens", 6}, {"stream", true}}.dump());
  ASSERT_TRUE(stream);
  ASSERT_EQ(stream->status, 200) << stream->body;
  EXPECT_TRUE(absl::StartsWith(stream->get_header_value("Content-Type"),
                               "text/event-stream"));
  std::string text;
  std::vector<std::string> events =
      absl::StrSplit(stream->body, "\n\n", absl::SkipEmpty());
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "data: [DONE]");
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_TRUE(absl::StartsWith(events[i], "data: ")) << events[i];
    const Json chunk = Json::parse(events[i].substr(6));
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, j["choices"][0]["text"]);  // greedy: the same answer
}

// A stop string taken from the greedy answer cuts the same answer there.
TEST_F(HttpApiTest, StopStringEndsTheAnswer) {
  const std::string body = R"({"prompt": "Stop here", "max_tokens": 12)";
  auto full = Post("/v1/completions", body + "}");
  ASSERT_TRUE(full);
  ASSERT_EQ(full->status, 200) << full->body;
  const std::string text = Json::parse(full->body)["choices"][0]["text"];
  // A one-character stop string from the middle of the answer.
  size_t p = text.size() / 2;
  while (p > 0 && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
  size_t end = p + 1;
  while (end < text.size() &&
         (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    ++end;
  }
  ASSERT_GT(text.size(), 1u) << "the answer is too short to cut";
  const std::string stop = text.substr(p, end - p);
  auto cut =
      Post("/v1/completions", body + ", \"stop\": " + Json(stop).dump() + "}");
  ASSERT_TRUE(cut);
  ASSERT_EQ(cut->status, 200) << cut->body;
  const Json j = Json::parse(cut->body);
  EXPECT_EQ(j["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

// x-session-id: new keeps the session; a second request appends to it; a
// fork leaves the parent as it was.
TEST_F(HttpApiTest, SessionsContinueAndFork) {
  auto first =
      Post("/v1/completions",
           Json{{"prompt", "Once upon a time"}, {"max_tokens", 3}}.dump(),
           {{"x-session-id", "room1.new"}});
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  const std::string id = first->get_header_value("x-session-id");
  EXPECT_TRUE(absl::StartsWith(id, "room1.")) << id;
  int64_t tokens1 = 0, tokens2 = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(first->get_header_value("x-session-tokens"), &tokens1));
  auto second = Post("/v1/completions",
                     Json{{"prompt", " there was"}, {"max_tokens", 3}}.dump(),
                     {{"x-session-id", id}});
  ASSERT_TRUE(second);
  ASSERT_EQ(second->status, 200) << second->body;
  EXPECT_EQ(second->get_header_value("x-session-id"), id);
  ASSERT_TRUE(
      absl::SimpleAtoi(second->get_header_value("x-session-tokens"), &tokens2));
  const Json usage = Json::parse(second->body)["usage"];
  EXPECT_EQ(tokens2, tokens1 + usage["prompt_tokens"].get<int64_t>() +
                         usage["completion_tokens"].get<int64_t>());

  auto fork = Post("/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "and?"}],
                       "max_tokens": 2})",
                   {{"x-session-id", id}, {"x-session-fork", "1"}});
  ASSERT_TRUE(fork);
  ASSERT_EQ(fork->status, 200) << fork->body;
  const std::string child = fork->get_header_value("x-session-id");
  EXPECT_NE(child, id);
  EXPECT_TRUE(absl::StartsWith(child, "room1.")) << child;
  // The parent still holds tokens2: continuing it adds to that count.
  auto third =
      Post("/v1/completions", Json{{"prompt", "."}, {"max_tokens", 1}}.dump(),
           {{"x-session-id", id}});
  ASSERT_TRUE(third);
  ASSERT_EQ(third->status, 200) << third->body;
  int64_t tokens3 = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(third->get_header_value("x-session-tokens"), &tokens3));
  const Json usage3 = Json::parse(third->body)["usage"];
  EXPECT_EQ(tokens3, tokens2 + usage3["prompt_tokens"].get<int64_t>() +
                         usage3["completion_tokens"].get<int64_t>());
}

TEST_F(HttpApiTest, DrainingAnswers503) {
  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << health->body;
  server_->BeginDrain();
  auto res = Post("/v1/completions", R"({"prompt": "hello"})");
  EXPECT_EQ(ErrorOf(res, 503)["type"], "service_unavailable_error");
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_EQ(res->get_header_value("Connection"), "close");
  health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(Json::parse(health->body)["status"], "draining");
}

// The fake device too small for the weights: the backend fails for good.
class HttpApiFailedBackendTest : public HttpApiTest {
 protected:
  void Configure(ServerConfig& c) override {
    c.backend = BackendKind::kFake;
    c.fake_device_bytes = 64 << 10;
  }
};

// A sticky backend failure: the request gets 500, and /health turns to 503
// "failed" (no Retry-After: it does not come back by itself) so that a
// liveness probe restarts the server.
TEST_F(HttpApiFailedBackendTest, HealthSaysFailed) {
  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << health->body;
  auto res = Post("/v1/completions", R"({"prompt": "hello"})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500) << res->body;
  health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503) << health->body;
  const Json j = Json::parse(health->body);
  EXPECT_EQ(j["status"], "failed") << health->body;
  EXPECT_NE(j["error"].get<std::string>().find("out of memory"),
            std::string::npos)
      << health->body;
  EXPECT_FALSE(health->has_header("Retry-After"));
}

// Roles, content and log-probability fields name the OpenAI field.
TEST(OpenAiJsonTest, ChecksRolesContentAndLogprobs) {
  auto param = [](const std::string& body, Endpoint e) {
    auto r = ParseOpenAiRequest(body, e);
    EXPECT_FALSE(r.ok()) << body;
    return Json::parse(ErrorBody(r.status()))["error"]["param"];
  };
  EXPECT_EQ(param(R"({"messages": [{"role": "wizard", "content": "x"}]})",
                  Endpoint::kChat),
            "messages.[0].role");
  EXPECT_EQ(param(R"({"messages": [{"role": "user"}]})", Endpoint::kChat),
            "messages.[0].content");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": null}]})",
                  Endpoint::kChat),
            "messages.[0].content");
  EXPECT_EQ(param(R"({"messages": [{"role": "user", "content": "x"}],
                      "top_logprobs": 2})",
                  Endpoint::kChat),
            "top_logprobs");
  EXPECT_EQ(param(R"({"prompt": "x", "logprobs": 6})", Endpoint::kCompletions),
            "logprobs");
  auto ok = ParseOpenAiRequest(
      R"({"messages": [{"role": "developer", "content": "x"},
                       {"role": "assistant", "content": null,
                        "tool_calls": []}],
          "logprobs": true, "top_logprobs": 3})",
      Endpoint::kChat);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->logprobs, 3);
  EXPECT_EQ(ApplySampling(SamplingParams(), *ok).logprobs, 3);
}

TEST_F(HttpApiTest, ModelByIdAndContextLength) {
  const std::string auth = std::string("Bearer ") + kToken;
  auto list = client_->Get("/v1/models", {{"Authorization", auth}});
  ASSERT_TRUE(list);
  const std::string id = Json::parse(list->body)["data"][0]["id"];
  auto one =
      client_->Get(("/v1/models/" + id).c_str(), {{"Authorization", auth}});
  ASSERT_TRUE(one);
  ASSERT_EQ(one->status, 200) << one->body;
  EXPECT_EQ(Json::parse(one->body)["id"], id);
  auto other = client_->Get("/v1/models/other", {{"Authorization", auth}});
  EXPECT_EQ(ErrorOf(other, 404)["code"], "model_not_found");
  // Sessions hold at most 8192 tokens here (SmallServerConfig), fewer
  // than the random model's 131072 of context: the session limit binds.
  const Json e = ErrorOf(
      Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2000000000})"),
      400);
  EXPECT_EQ(e["code"], "max_session_tokens");
  EXPECT_EQ(e["param"], "max_tokens");
  EXPECT_TRUE(absl::StrContains(e["message"].get<std::string>(), "8192"))
      << e["message"];
  // Without max_tokens the answer is capped to the room left, not refused.
  auto res = Post("/v1/completions", R"({"prompt": "hi"})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

// --context-length below the session limit: the model's context binds.
TEST(HttpApiContextTest, ContextLengthFlagIsEnforced) {
  ServerConfig c = testing::SmallServerConfig(
      ckv::testing::RandomModelPath("http_ctx", Spec()));
  c.http_listen_address = "127.0.0.1:0";
  c.context_length = 64;
  auto server = ClusterKvServer::Start(c, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  auto port = StartHttpApi(**server);
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client client("127.0.0.1", *port);
  auto res = client.Post(
      "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 60})",
      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 400) << res->body;
  const Json e = Json::parse(res->body)["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["param"], "messages");
  EXPECT_TRUE(absl::StartsWith(e["message"].get<std::string>(),
                               "This model's maximum context length is 64"))
      << e["message"];
  EXPECT_FALSE(res->has_header("Retry-After"));
}

// ---- the status page ------------------------------------------------------

StatusCounters CountersAt(double seconds, int64_t input, int64_t decoded,
                          int64_t ttft_count, double ttft_sum) {
  StatusCounters c;
  c.steady_seconds = seconds;
  c.unix_ms = static_cast<int64_t>(seconds * 1000);
  c.input_tokens = input;
  c.decoded_tokens = decoded;
  c.has_ttft = true;
  c.ttft_count = ttft_count;
  c.ttft_sum_seconds = ttft_sum;
  c.queue_depth = static_cast<int>(seconds);
  return c;
}

TEST(StatusHistoryTest, RatesBetweenSamplesAndBoundedLength) {
  StatusHistory h(/*capacity=*/3);
  h.Record(CountersAt(10, 0, 0, 0, 0));  // baseline only
  EXPECT_TRUE(h.Samples().empty());
  h.Record(CountersAt(12, 100, 40, 2, 0.5));
  h.Record(CountersAt(12, 999, 999, 9, 9));   // no time elapsed: ignored
  h.Record(CountersAt(13, 130, 50, 2, 0.5));  // no request finished
  std::vector<StatusSample> s = h.Samples();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_DOUBLE_EQ(s[0].input_tokens_per_second, 50.0);
  EXPECT_DOUBLE_EQ(s[0].decode_tokens_per_second, 20.0);
  EXPECT_DOUBLE_EQ(s[0].ttft_seconds, 0.25);
  EXPECT_EQ(s[0].queue_depth, 12);
  EXPECT_DOUBLE_EQ(s[1].input_tokens_per_second, 30.0);
  EXPECT_TRUE(std::isnan(s[1].ttft_seconds));
  for (int t = 14; t < 20; ++t) h.Record(CountersAt(t, 130, 50 + t, 2, 0.5));
  s = h.Samples();
  ASSERT_EQ(s.size(), 3u);  // the oldest dropped
  EXPECT_EQ(s.back().unix_ms, 19000);
  EXPECT_EQ(s.front().unix_ms, 17000);
}

std::set<std::string> KeysOf(const Json& j) {
  std::set<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.insert(k);
  return keys;
}

TEST_F(HttpApiTest, StatusCountsSessionsWithAStableShape) {
  auto no_token = client_->Get("/v1/status");
  EXPECT_EQ(ErrorOf(no_token, 401)["type"], "authentication_error");
  std::vector<std::string> ids;
  std::vector<int64_t> tokens;
  for (const char* token : {kToken, kToken, kBobToken}) {
    auto res =
        client_->Post("/v1/completions",
                      {{"Authorization", std::string("Bearer ") + token},
                       {"x-session-id", "new"}},
                      Json{{"prompt", "status page"}, {"max_tokens", 2}}.dump(),
                      "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    ids.push_back(res->get_header_value("x-session-id"));
    tokens.emplace_back();
    ASSERT_TRUE(absl::SimpleAtoi(res->get_header_value("x-session-tokens"),
                                 &tokens.back()));
  }
  auto res = client_->Get("/v1/status",
                          {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_TRUE(absl::StartsWith(res->get_header_value("Content-Type"),
                               "application/json"));
  const Json j = Json::parse(res->body);
  EXPECT_EQ(KeysOf(j), (std::set<std::string>{
                           "schema", "time_unix_ms", "version", "draining",
                           "model", "backend", "sessions", "queue", "admission",
                           "totals", "recall", "history"}));
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["draining"], false);
  EXPECT_EQ(j["model"]["layers"], Spec().layers);
  // cpu (auto), or fake in http_api_test_fake.
  EXPECT_EQ(j["backend"]["name"],
            BackendKindName(ResolveBackendKind(testing::TestBackend())));
  const Json& s = j["sessions"];
  EXPECT_EQ(s["count"], 3);  // every tenant's
  EXPECT_EQ(s["yours"], 2);  // alice's, listed
  ASSERT_EQ(s["list"].size(), 2u);
  std::set<std::string> listed;
  for (const Json& row : s["list"]) {
    EXPECT_EQ(KeysOf(row), (std::set<std::string>{
                               "id", "policy", "tokens", "segments",
                               "clustered_tokens", "host_bytes", "device_bytes",
                               "cache_hit_rate", "busy", "idle_seconds"}));
    listed.insert(row["id"].get<std::string>());
    EXPECT_EQ(row["tokens"], tokens[0]);  // same prompt, greedy
    EXPECT_EQ(row["policy"], "clusterkv");
    EXPECT_GT(row["host_bytes"].get<int64_t>(), 0);
  }
  EXPECT_EQ(listed, (std::set<std::string>{ids[0], ids[1]}));
  EXPECT_GT(s["host_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(KeysOf(j["queue"]),
            (std::set<std::string>{"queued", "waiting_input", "active",
                                   "max_queued", "steps"}));
  EXPECT_GT(j["queue"]["steps"].get<int64_t>(), 0);
  EXPECT_EQ(j["admission"]["admitted"], 3);
  EXPECT_EQ(j["admission"]["rejected"], 0);
  const Json& totals = j["totals"];
  EXPECT_EQ(totals["generated_tokens"].get<int64_t>() +
                totals["prompt_tokens"].get<int64_t>(),
            tokens[0] + tokens[1] + tokens[2]);
  EXPECT_EQ(totals["requests_ok"], 3);
  EXPECT_GT(totals["ttft_mean_seconds"].get<double>(), 0.0);
  const Json& h = j["history"];
  EXPECT_EQ(KeysOf(h),
            (std::set<std::string>{"unix_ms", "input_tokens_per_second",
                                   "decode_tokens_per_second", "ttft_seconds",
                                   "queue_depth", "sessions"}));
  for (const auto& [name, column] : h.items()) {
    EXPECT_EQ(column.size(), h["unix_ms"].size()) << name;
  }
  // Bob sees the same server-wide count and only his own session.
  auto bob = client_->Get(
      "/v1/status", {{"Authorization", std::string("Bearer ") + kBobToken}});
  ASSERT_TRUE(bob);
  ASSERT_EQ(bob->status, 200) << bob->body;
  const Json b = Json::parse(bob->body)["sessions"];
  EXPECT_EQ(b["count"], 3);
  ASSERT_EQ(b["list"].size(), 1u);
  EXPECT_EQ(b["list"][0]["id"], ids[2]);
}

// The page is public (it holds no data), HTML, and loads nothing from
// elsewhere: no URL at all, no src or href attribute.
TEST_F(HttpApiTest, StatusPageIsSelfContainedHtml) {
  auto res = client_->Get("/");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_TRUE(
      absl::StartsWith(res->get_header_value("Content-Type"), "text/html"));
  EXPECT_TRUE(absl::StrContains(
      res->get_header_value("Content-Security-Policy"), "default-src 'none'"));
  const std::string& page = res->body;
  EXPECT_TRUE(absl::StartsWith(page, "<!DOCTYPE html>"));
  EXPECT_TRUE(absl::StrContains(page, "fetch(\"v1/status\""));
  EXPECT_TRUE(absl::StrContains(page, "id=\"sessions-count\""));
  for (const char* banned :
       {"http://", "https://", "src=", "href=", "@import", "url("}) {
    EXPECT_FALSE(absl::StrContains(page, banned)) << banned;
  }
}

// End to end with a template: the rendered ChatML is tokenized with its
// special tokens parsed (<|im_start|> is one token) and no BOS added.
TEST(HttpApiTemplateTest, ChatPromptIsTheTemplatesTokens) {
  RandomModelSpec spec = Spec();
  spec.vocab = ckv::testing::FixturesDir() + "/tokenizer/ggml-vocab-qwen2.gguf";
  const std::string path = ckv::testing::RandomModelPath("http_qwen2", spec);
  ServerConfig c = testing::SmallServerConfig(path);
  c.http_listen_address = "127.0.0.1:0";
  auto server = ClusterKvServer::Start(c, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  auto port = StartHttpApi(**server);
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client client("127.0.0.1", *port);
  client.set_read_timeout(60);
  auto res = client.Post(
      "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})",
      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto model = LoadModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const Tokenizer& tok = *(*model)->tokenizer;
  auto ids = tok.Encode(
      "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
      /*add_special=*/false, /*parse_special=*/true);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(std::count(ids->begin(), ids->end(), ids->front()), 3)
      << "<|im_start|> is one token, three times";
  EXPECT_EQ(Json::parse(res->body)["usage"]["prompt_tokens"],
            static_cast<int64_t>(ids->size()));
}

}  // namespace
}  // namespace ckv::server::http
