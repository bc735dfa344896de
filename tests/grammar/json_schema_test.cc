// JSON Schema conversion: unit cases (the corpus validation runs in
// json_schema_corpus_test, with python3-jsonschema).
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/recognizer.h"

namespace ckv::grammar {
namespace {

bool Matches(const std::string& schema, const std::string& text) {
  auto gbnf = JsonSchemaToGbnf(schema, {});
  EXPECT_TRUE(gbnf.ok()) << gbnf.status();
  if (!gbnf.ok()) return false;
  auto g = CompileGbnf(*gbnf);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << *gbnf;
  if (!g.ok()) return false;
  Recognizer rec(*g, {});
  auto s = rec.Start();
  for (unsigned char b : text) {
    s = rec.Step(s, b);
    if (s == Recognizer::kDead) return false;
  }
  return rec.Accepting(s);
}

TEST(JsonSchema, ObjectsWithRequiredAndOptionalProperties) {
  const std::string s = R"({"type":"object","properties":{
    "a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
    "required":["b"],"additionalProperties":false})";
  EXPECT_TRUE(Matches(s, R"({"b":"x"})"));
  EXPECT_TRUE(Matches(s, R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(Matches(s, R"({ "a": -3, "b": "", "c": false })"));
  EXPECT_TRUE(Matches(s, R"({"b":"x","c":true})"));
  EXPECT_FALSE(Matches(s, R"({"a":1})"));          // b required
  EXPECT_FALSE(Matches(s, R"({"b":"x","a":1})"));  // schema order
  EXPECT_FALSE(Matches(s, R"({"b":"x","d":1})"));  // no extras
  EXPECT_FALSE(Matches(s, R"({"b":"x",})"));
}

TEST(JsonSchema, IntegerAndNumberBounds) {
  const std::string i = R"({"type":"integer","minimum":-12,"maximum":305})";
  for (int v = -20; v <= 320; ++v) {
    EXPECT_EQ(Matches(i, std::to_string(v)), v >= -12 && v <= 305) << v;
  }
  EXPECT_FALSE(Matches(i, "007"));
  EXPECT_FALSE(Matches(i, "-0"));
  const std::string x =
      R"({"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":9})";
  EXPECT_FALSE(Matches(x, "5"));
  EXPECT_TRUE(Matches(x, "6"));
  EXPECT_FALSE(Matches(x, "9"));
  const std::string n = R"({"type":"number","minimum":-1,"maximum":2})";
  EXPECT_TRUE(Matches(n, "1.75"));
  EXPECT_TRUE(Matches(n, "2"));
  EXPECT_TRUE(Matches(n, "2.00"));
  EXPECT_TRUE(Matches(n, "-0.5"));
  EXPECT_TRUE(Matches(n, "-1"));
  EXPECT_FALSE(Matches(n, "2.5"));
  EXPECT_FALSE(Matches(n, "-1.5"));
  EXPECT_FALSE(Matches(n, "3"));
}

TEST(JsonSchema, StringsArraysEnumsRefs) {
  EXPECT_TRUE(Matches(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})",
                      R"("AB-123")"));
  EXPECT_FALSE(Matches(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})",
                       R"("AB-12")"));
  EXPECT_TRUE(Matches(R"({"type":"string","pattern":"a\"b"})", R"("xa\"by")"));
  EXPECT_TRUE(
      Matches(R"({"type":"string","format":"date"})", R"("2024-02-28")"));
  EXPECT_FALSE(
      Matches(R"({"type":"string","format":"date"})", R"("2024-02-30")"));
  EXPECT_TRUE(
      Matches(R"({"type":"string","minLength":2,"maxLength":3})", R"("a\nb")"));
  EXPECT_FALSE(
      Matches(R"({"type":"string","minLength":2,"maxLength":3})", R"("abcd")"));
  const std::string a =
      R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2})";
  EXPECT_FALSE(Matches(a, "[]"));
  EXPECT_TRUE(Matches(a, "[1, 2]"));
  EXPECT_FALSE(Matches(a, "[1,2,3]"));
  EXPECT_TRUE(
      Matches(R"({"enum":["x",1,null,{"k":[true]}]})", R"({"k":[true]})"));
  EXPECT_FALSE(Matches(R"({"enum":["x",1]})", R"("y")"));
  EXPECT_TRUE(Matches(R"({"const":"only"})", R"("only")"));
  const std::string tree = R"({"$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v","kids"],"additionalProperties":false}},"$ref":"#/$defs/node"})";
  EXPECT_TRUE(Matches(tree, R"({"v":1,"kids":[{"v":2,"kids":[]}]})"));
  EXPECT_FALSE(Matches(tree, R"({"v":1,"kids":[{"v":2}]})"));
  EXPECT_TRUE(
      Matches(R"({"anyOf":[{"type":"integer"},{"type":"null"}]})", "null"));
  EXPECT_TRUE(Matches(R"({"type":["string","null"]})", R"("s")"));
}

TEST(JsonSchema, UnsupportedAndHostileSchemasAreClearErrors) {
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += R"({"type":"array","items":)";
  deep += "{}" + std::string(200, '}');
  std::string huge_enum = R"({"enum":[)";
  for (int i = 0; i < 10000; ++i) absl::StrAppend(&huge_enum, i ? "," : "", i);
  huge_enum += "]}";
  const std::string huge_pattern =
      R"({"type":"string","pattern":")" + std::string(1 << 20, 'a') + "\"}";
  struct Case {
    std::string schema, want;
  } cases[] = {
      {"{", "not valid JSON"},
      {R"({"type":"number","multipleOf":2})", "'multipleOf' is not supported"},
      {R"({"type":"number","minimum":0.5})", "must be an integer"},
      {R"({"type":"string","format":"color"})", "format 'color'"},
      {R"j({"type":"string","pattern":"(a)\\1"})j", "backreferences"},
      {R"j({"type":"string","pattern":"(?=a)"})j", "lookaround"},
      {R"({"$ref":"#/nowhere"})", "$ref '#/nowhere'"},
      {R"({"type":"object","properties":{},"required":["x"]})",
       "required property 'x'"},
      {R"({"type":"wat"})", "unknown type"},
      {deep, "nesting deeper than"},
      {huge_enum, "enum has 10000 values"},
      {huge_pattern, "bytes; the limit is"},
  };
  for (const Case& c : cases) {
    auto g = JsonSchemaToGbnf(c.schema, {});
    ASSERT_FALSE(g.ok()) << c.schema.substr(0, 60);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.want), std::string::npos)
        << g.status();
  }
}

}  // namespace
}  // namespace ckv::grammar
