// The wire and OpenAI-shaped constraint fields: mapping, binding to the
// vocabulary, and INVALID_ARGUMENT with a clear message for bad input.
#include <string>

#include "gtest/gtest.h"
#include "server/constraint_convert.h"
#include "server/service_convert.h"
#include "tests/grammar/test_vocab.h"

namespace ckv::server {
namespace {

using grammar::ConstraintSpec;
using json = nlohmann::json;

void ExpectInvalid(const absl::Status& s, const std::string& want) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(want), std::string::npos) << s;
}

TEST(ConstraintProto, MergeSamplingBindsAndRejects) {
  auto tok = grammar::testing::DemoTokenizer();
  ASSERT_NE(tok, nullptr) << "models/kjv-llama.gguf is missing";
  v1::SamplingParams p;
  p.mutable_constraint()->set_gbnf("root ::= \"yes\" | \"no\"");
  auto s = MergeSampling(SamplingParams{}, p, tok->vocab_size(), tok.get());
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_NE(s->constraint, nullptr);
  EXPECT_EQ(s->constraint->vocab->vocab_size(), tok->vocab_size());
  v1::SamplingParams back;
  ToProto(*s, &back);
  EXPECT_EQ(back.constraint().gbnf(), p.constraint().gbnf());

  p.mutable_constraint()->set_json_schema(R"({"type":"object","not":{}})");
  ExpectInvalid(MergeSampling(SamplingParams{}, p, 0, tok.get()).status(),
                "sampling.constraint: json_schema at #: keyword 'not'");
  p.mutable_constraint()->set_gbnf("root ::= root \"a\"");
  ExpectInvalid(MergeSampling(SamplingParams{}, p, 0, tok.get()).status(),
                "left-recursive");
  p.mutable_constraint()->set_json_object(true);
  EXPECT_TRUE(MergeSampling(SamplingParams{}, p, 0, tok.get()).ok());
  p.set_ignore_eos(true);
  ExpectInvalid(MergeSampling(SamplingParams{}, p, 0, tok.get()).status(),
                "ignore_eos");
  p.clear_ignore_eos();
  // A session's defaults (no tokenizer) cannot hold one.
  ExpectInvalid(MergeSampling(SamplingParams{}, p).status(),
                "not to a session's defaults");
  p.mutable_constraint()->set_json_object(false);
  ExpectInvalid(MergeSampling(SamplingParams{}, p, 0, tok.get()).status(),
                "holds none of");
  p.mutable_constraint()->Clear();
  ExpectInvalid(MergeSampling(SamplingParams{}, p, 0, tok.get()).status(),
                "holds none of");
}

TEST(ConstraintOpenAi, ResponseFormatAndGrammar) {
  auto none = ConstraintFromOpenAi(json::parse(R"({"model":"m"})"));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto text = ConstraintFromOpenAi(
      json::parse(R"({"response_format":{"type":"text"}})"));
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->has_value());
  auto obj = ConstraintFromOpenAi(
      json::parse(R"({"response_format":{"type":"json_object"}})"));
  ASSERT_TRUE(obj.ok() && obj->has_value());
  EXPECT_EQ((*obj)->kind, ConstraintSpec::kJsonObject);
  auto schema = ConstraintFromOpenAi(json::parse(R"({"response_format":{
      "type":"json_schema","json_schema":{"name":"x","strict":true,
      "schema":{"type":"object","properties":{"a":{"type":"integer"}},
      "required":["a"],"additionalProperties":false}}}})"));
  ASSERT_TRUE(schema.ok() && schema->has_value()) << schema.status();
  EXPECT_EQ((*schema)->kind, ConstraintSpec::kJsonSchema);
  EXPECT_EQ(json::parse((*schema)->text)["required"][0], "a");
  auto gbnf =
      ConstraintFromOpenAi(json::parse(R"({"grammar":"root ::= \"a\""})"));
  ASSERT_TRUE(gbnf.ok() && gbnf->has_value());
  EXPECT_EQ((*gbnf)->kind, ConstraintSpec::kGbnf);

  struct Case {
    const char* body;
    const char* want;
  } cases[] = {
      {R"({"response_format":"json"})", "response_format must be an object"},
      {R"({"response_format":{}})", "response_format.type is required"},
      {R"({"response_format":{"type":"yaml"}})", "'yaml' is unknown"},
      {R"({"response_format":{"type":"json_schema"}})",
       "json_schema is required"},
      {R"({"response_format":{"type":"json_schema","json_schema":{"schema":{}}}})",
       "json_schema.name is required"},
      {R"({"response_format":{"type":"json_schema","json_schema":{"name":"n"}}})",
       "json_schema.schema is required"},
      {R"({"grammar":7})", "grammar must be a string"},
      {R"({"grammar":"root ::= \"a\"","response_format":{"type":"json_object"}})",
       "cannot both"},
  };
  for (const Case& c : cases) {
    ExpectInvalid(ConstraintFromOpenAi(json::parse(c.body)).status(), c.want);
  }
}

TEST(ConstraintOpenAi, ApplyConstraintCompilesForTheVocabulary) {
  auto tok = grammar::testing::DemoTokenizer();
  ASSERT_NE(tok, nullptr);
  SamplingParams s;
  EXPECT_TRUE(
      ApplyConstraint({ConstraintSpec::kJsonObject, ""}, *tok, &s).ok());
  EXPECT_NE(s.constraint, nullptr);
  SamplingParams bad;
  ExpectInvalid(
      ApplyConstraint({ConstraintSpec::kGbnf, "root ::= [z-a]"}, *tok, &bad),
      "end before start");
  EXPECT_EQ(bad.constraint, nullptr);
}

}  // namespace
}  // namespace ckv::server
