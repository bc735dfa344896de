// The HTTP API's structured outputs and tools (docs/http-api.md,
// "Structured outputs" and "Tools"): the forced-call grammar per family on
// literal calls, 400s naming the field for malformed and hostile
// constraints and tools, and constrained answers of the served API.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/grammar/matcher.h"
#include "model/grammar/recognizer.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_json.h"
#include "server/http/openai_tools.h"
#include "tests/server/http_api_fixture.h"

namespace ckv::server::http {
namespace {

using Json = nlohmann::json;

bool GrammarAccepts(const grammar::ConstraintSpec& spec,
                    const std::string& text) {
  auto g = grammar::CompileSpec(spec);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << spec.text;
  if (!g.ok()) return false;
  grammar::Recognizer rec(*g, {});
  grammar::Recognizer::State st = rec.Start();
  for (unsigned char b : text) {
    st = rec.Step(st, b);
    if (st == grammar::Recognizer::kDead) return false;
  }
  return rec.Accepting(st);
}

// tool_choice required / named: per family, the grammar admits exactly
// one call of an eligible tool whose arguments follow its schema ($defs
// and $ref kept apart per tool).
TEST(OpenAiToolsTest, ForcedCallGrammarPerFamily) {
  auto r = ParseOpenAiRequest(R"({"messages": [{"role": "user",
      "content": "x"}], "tool_choice": "required", "tools": [
      {"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"$ref": "#/$defs/city"},
         "days": {"type": "integer", "minimum": 1, "maximum": 5}},
         "required": ["city", "days"], "additionalProperties": false,
         "$defs": {"city": {"enum": ["Paris", "Rome"]}}}}},
      {"type": "function", "function": {"name": "ping"}}]})",
                              Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  using chat::ToolCallSyntax;
  auto hermes = ForcedToolGrammar(ToolCallSyntax::kHermes, *r);
  ASSERT_TRUE(hermes.ok()) << hermes.status();
  ASSERT_TRUE(hermes->has_value());
  const std::string weather =
      R"({"name": "get_weather", "arguments": {"city": "Rome", "days": 3}})";
  EXPECT_TRUE(
      GrammarAccepts(**hermes, "<tool_call>\n" + weather + "\n</tool_call>"));
  EXPECT_TRUE(GrammarAccepts(
      **hermes,
      "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(GrammarAccepts(**hermes, weather));  // no tags
  EXPECT_FALSE(GrammarAccepts(**hermes, R"(<tool_call>
{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}
</tool_call>)"));
  EXPECT_FALSE(GrammarAccepts(**hermes, R"(<tool_call>
{"name": "get_weather", "arguments": {"city": "Rome", "days": 9}}
</tool_call>)"));
  EXPECT_FALSE(
      GrammarAccepts(**hermes,
                     "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n"
                     "</tool_call>"));
  auto llama = ForcedToolGrammar(ToolCallSyntax::kLlama3Json, *r);
  ASSERT_TRUE(llama.ok() && llama->has_value());
  EXPECT_TRUE(GrammarAccepts(
      **llama,
      R"({"name": "get_weather", "parameters": {"city": "Paris", "days": 1}})"));
  EXPECT_FALSE(GrammarAccepts(**llama, weather));  // "arguments"
  auto mistral = ForcedToolGrammar(ToolCallSyntax::kMistral, *r);
  ASSERT_TRUE(mistral.ok() && mistral->has_value());
  EXPECT_TRUE(GrammarAccepts(**mistral, "[" + weather + "]"));
  auto granite = ForcedToolGrammar(ToolCallSyntax::kGranite, *r);
  ASSERT_TRUE(granite.ok() && granite->has_value());
  EXPECT_TRUE(GrammarAccepts(**granite, "[" + weather + "]"));
  // Named: only that tool.
  r->tool_choice = ToolChoice::kNamed;
  r->tool_choice_name = "ping";
  auto named = ForcedToolGrammar(ToolCallSyntax::kHermes, *r);
  ASSERT_TRUE(named.ok() && named->has_value());
  EXPECT_FALSE(
      GrammarAccepts(**named, "<tool_call>\n" + weather + "\n</tool_call>"));
  // auto: no grammar; a schema outside the subset: 400 naming tools.
  r->tool_choice = ToolChoice::kAuto;
  auto none = ForcedToolGrammar(ToolCallSyntax::kHermes, *r);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  r->tool_choice = ToolChoice::kRequired;
  r->tools[1].parameters = R"({"type": "object", "not": {}})";
  auto bad = ForcedToolGrammar(ToolCallSyntax::kHermes, *r);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(Json::parse(ErrorBody(bad.status()))["error"]["param"], "tools");
}

// response_format and grammar: malformed or hostile constraints are 400
// invalid_request_error naming the field (compiles are bounded by
// grammar::GrammarLimits); tools the model cannot render, and tool_choice
// naming no tool, are 400 too.
TEST_F(HttpApiTest, ConstraintAndToolErrorsNameTheField) {
  std::string exponential = "root ::= x30\nx0 ::= \"a\"\n";
  for (int i = 1; i <= 30; ++i) {
    absl::StrAppend(&exponential, "x", i, " ::= x", i - 1, " | x", i - 1,
                    " \"b\"\n");
  }
  Json big_enum = Json::array();
  for (int i = 0; i < 5000; ++i) big_enum.push_back(absl::StrCat("v", i));
  const Json tool = {{"type", "function"},
                     {"function", {{"name", "f"}, {"parameters", {}}}}};
  struct Case {
    Json extra;
    std::string param, in_message;
  } cases[] = {
      {{{"response_format", {{"type", "yaml"}}}}, "response_format", "yaml"},
      {{{"response_format",
         {{"type", "json_schema"},
          {"json_schema",
           {{"name", "x"}, {"schema", {{"not", Json::object()}}}}}}}},
       "response_format",
       "'not'"},
      {{{"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"schema", Json::object()}}}}}},
       "response_format",
       "name"},
      {{{"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"name", "x"}, {"schema", {{"enum", big_enum}}}}}}}},
       "response_format",
       "enum"},
      {{{"grammar", "root ::= root \"a\" | \"b\""}},
       "grammar",
       "left-recursive"},
      {{{"grammar", exponential}}, "grammar", "exponential"},
      {{{"grammar",
         absl::StrCat("root ::= \"", std::string(1 << 20, 'a'), "\"")}},
       "grammar",
       "limit"},
      {{{"grammar", "root ::= \"a\""},
        {"response_format", {{"type", "json_object"}}}},
       "grammar",
       "both"},
      {{{"tools", Json::array({tool})}}, "tools", "chat template"},
      {{{"tools", Json::array({tool})},
        {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}},
       "tool_choice",
       "'g'"},
      {{{"tool_choice", "required"}}, "tool_choice", "tools"},
      {{{"tools", Json::array({tool, tool})}},
       "tools.[1].function.name",
       "twice"},
  };
  for (const Case& c : cases) {
    Json body = c.extra;
    body["messages"] = Json::array({{{"role", "user"}, {"content", "x"}}});
    body["max_tokens"] = 4;
    const Json e = ErrorOf(Post("/v1/chat/completions", body.dump()), 400);
    EXPECT_EQ(e["type"], "invalid_request_error")
        << c.extra.dump(0).substr(0, 200);
    EXPECT_EQ(e["param"], c.param) << e;
    EXPECT_TRUE(
        absl::StrContains(e["message"].get<std::string>(), c.in_message))
        << e["message"];
  }
}

// A strict json_schema answer follows the schema; a GBNF on /v1/completions
// gives one of its sentences; both end by EOS ("stop") once complete.
TEST_F(HttpApiTest, ConstrainedAnswersFollowTheirGrammar) {
  const Json schema = Json::parse(R"({"type": "object", "properties": {
      "city": {"enum": ["Paris", "Rome", "Oslo"]},
      "days": {"type": "integer", "minimum": 1, "maximum": 9},
      "ok": {"type": "boolean"}},
      "required": ["city", "days", "ok"], "additionalProperties": false})");
  for (int seed = 1; seed <= 3; ++seed) {
    Json body = Json::parse(R"({"messages": [{"role": "user",
        "content": "Trip?"}], "max_tokens": 200, "temperature": 1,
        "response_format":
        {"type": "json_schema", "json_schema": {"name": "trip",
        "strict": true}}})");
    body["seed"] = seed;
    body["response_format"]["json_schema"]["schema"] = schema;
    auto res = Post("/v1/chat/completions", body.dump());
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const Json j = Json::parse(res->body);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    const std::string text = j["choices"][0]["message"]["content"];
    const Json out = Json::parse(text, nullptr, false);
    ASSERT_TRUE(out.is_object()) << text;
    EXPECT_EQ(out.size(), 3u) << text;
    EXPECT_TRUE(out["city"] == "Paris" || out["city"] == "Rome" ||
                out["city"] == "Oslo")
        << text;
    ASSERT_TRUE(out["days"].is_number_integer()) << text;
    EXPECT_GE(out["days"].get<int>(), 1);
    EXPECT_LE(out["days"].get<int>(), 9);
    EXPECT_TRUE(out["ok"].is_boolean()) << text;
  }
  auto res = Post("/v1/completions",
                  Json{{"prompt", "Answer:"},
                       {"max_tokens", 20},
                       {"grammar", "root ::= (\"yes\" | \"no\") \".\""}}
                      .dump());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json j = Json::parse(res->body);
  const std::string text = j["choices"][0]["text"];
  EXPECT_TRUE(text == "yes." || text == "no.") << text;
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

}  // namespace
}  // namespace ckv::server::http
