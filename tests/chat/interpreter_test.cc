// The interpreter against Jinja2 itself on small templates
// (tests/chat/jinja_cases.json, written by make_jinja_cases.py), and unit
// tests of its pieces: lexer whitespace control, parser errors, values.
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "model/chat/chat_template.h"
#include "model/chat/lexer.h"
#include "model/chat/parser.h"
#include "model/chat/value.h"
#include "nlohmann/json.hpp"

namespace ckv::chat {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::string> RenderText(const std::string& source,
                                       const std::string& context_json) {
  auto tmpl = ChatTemplate::Parse(source);
  if (!tmpl.ok()) return tmpl.status();
  auto context = ValueFromJson(context_json);
  if (!context.ok()) return context.status();
  return tmpl->RenderContext(*context, TemplateDate{});
}

TEST(JinjaCasesTest, MatchesJinja2) {
  const std::string path = std::string(CKV_CHAT_TEST_DIR) + "/jinja_cases.json";
  const std::string text = ReadAll(path);
  ASSERT_FALSE(text.empty()) << "missing " << path;
  const auto cases = nlohmann::ordered_json::parse(text);
  ASSERT_GE(cases.size(), 70u);
  for (const auto& c : cases) {
    const std::string source = c["template"];
    SCOPED_TRACE(source);
    auto got = RenderText(source, c["context"].dump());
    if (c.contains("error")) {
      ASSERT_FALSE(got.ok()) << "rendered: " << *got;
      if (source.find("raise_exception") != std::string::npos) {
        EXPECT_EQ(got.status().message(), c["error"].get<std::string>());
      }
    } else {
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, c["expected"].get<std::string>());
    }
  }
}

std::string TextOf(const std::vector<Token>& tokens) {
  std::string out;
  for (const Token& t : tokens) {
    if (t.type == TokenType::kText) out += "[" + t.text + "]";
    if (t.type == TokenType::kBlockBegin) out += "{%";
    if (t.type == TokenType::kVarBegin) out += "{{";
  }
  return out;
}

TEST(LexerTest, WhitespaceControl) {
  // trim_blocks drops one newline after a block tag, not after {{ }}.
  auto t = Lex("{% if x %}\na{{ y }}\nb");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(TextOf(*t), "{%[a]{{[\nb]");
  // lstrip_blocks removes indentation before a block tag only.
  t = Lex("x\n   {% if y %}   {{ z }}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(TextOf(*t), "[x\n]{%[   ]{{");
  // '-' strips all whitespace, newlines included; '+' keeps indentation.
  t = Lex("a \n\t{%- if y -%} \n b\n  {%+ if z %}");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(TextOf(*t), "[a]{%[b\n  ]{%");
  // One trailing newline of the source is dropped; CRLF becomes LF.
  t = Lex("a\r\nb\n");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(TextOf(*t), "[a\nb]");
}

TEST(LexerTest, Tokens) {
  auto t = Lex("{{ a.b[1] | f(x='s\\n', y=2.5e1) ~ \"q\" // 3 != -1 }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::string> texts;
  for (const Token& tok : *t) texts.push_back(tok.text);
  const std::vector<std::string> want = {
      "x", "a", ".",  "b", "[", "1", "]",  "|", "f",  "(", "x", "=", "s\n", ",",
      "y", "=", "25", ")", "~", "q", "//", "3", "!=", "-", "1", "x", ""};
  ASSERT_EQ(texts.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == "25") {
      EXPECT_EQ((*t)[i].type, TokenType::kFloat);
      EXPECT_DOUBLE_EQ((*t)[i].float_value, 25.0);
    } else {
      EXPECT_EQ(texts[i], want[i]) << i;
    }
  }
}

TEST(LexerTest, Errors) {
  for (const char* bad :
       {"{{ 'open", "{% if x", "{# never closed", "{{ a ) }}", "{{ 1 $ 2 }}",
        "{{ 99999999999999999999 }}", "\xff{{ x }}"}) {
    EXPECT_FALSE(Lex(bad).ok()) << bad;
  }
  // A '}}' inside brackets does not end the tag.
  auto t = Lex("{{ {'a': {'b': 1}} }}");
  ASSERT_TRUE(t.ok()) << t.status();
}

TEST(ParserTest, Errors) {
  for (const char* bad :
       {"{% if x %}", "{% for x in y %}", "{% endif %}",
        "{{ x | nosuchfilter }}", "{{ x is nosuchtest }}", "{% include 'x' %}",
        "{% set %}", "{{ f(a=1, 2) }}", "{% macro m(a=1, b) %}{% endmacro %}",
        "{{ }}", "{% for x in y recursive %}{% endfor %}", "{{ (1, }}",
        "{% if x %}{% else %}{% elif y %}{% endif %}"}) {
    auto tokens = Lex(bad);
    if (!tokens.ok()) continue;
    EXPECT_FALSE(Parse(*tokens, 64).ok()) << bad;
  }
}

TEST(ValueTest, ReprAndJson) {
  auto v = ValueFromJson(R"({"a": [1, 2.5, null, true, "x'y"], "b": {}})");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Repr(), "{'a': [1, 2.5, None, True, \"x'y\"], 'b': {}}");
  auto json = ToJson(*v);
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(*json, R"({"a": [1, 2.5, null, true, "x'y"], "b": {}})");
  EXPECT_EQ(FloatRepr(1e16), "1e+16");
  EXPECT_EQ(FloatRepr(123.0), "123.0");
  EXPECT_EQ(FloatRepr(0.0001), "0.0001");
  EXPECT_EQ(FloatRepr(-2.5e-7), "-2.5e-07");
  EXPECT_FALSE(ToJson(Value::Undefined("u")).ok());
  EXPECT_FALSE(ValueFromJson("[1,").ok());
}

TEST(ValueTest, DictKeysFollowPython) {
  Dict d;
  ASSERT_TRUE(d.Set(Value::Int(1), Value::String("int")).ok());
  ASSERT_TRUE(d.Set(Value::Float(1.0), Value::String("float")).ok());
  ASSERT_TRUE(d.Set(Value::Bool(true), Value::String("bool")).ok());
  EXPECT_EQ(d.entries.size(), 1u);
  EXPECT_EQ(d.Find(Value::Int(1))->str(), "bool");
  EXPECT_FALSE(d.Set(Value::MakeList({}), Value::None()).ok());
  // Past the linear-search size the index must agree.
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(
        d.Set(Value::String("k" + std::to_string(i)), Value::Int(i)).ok());
  }
  ASSERT_TRUE(d.Set(Value::String("k3"), Value::Int(-3)).ok());
  EXPECT_EQ(d.entries.size(), 41u);
  EXPECT_EQ(d.Find("k3")->int_value(), -3);
  EXPECT_EQ(d.Find("k39")->int_value(), 39);
  EXPECT_EQ(d.Find(Value::Int(1))->str(), "bool");
  EXPECT_EQ(d.Find("nope"), nullptr);
}

TEST(ChatTemplateTest, MessagesAndSpecialTokens) {
  auto tmpl = ChatTemplate::Parse(
      "{{ bos_token is defined }}{% for m in messages %}<{{ m.role }}>"
      "{{ m.content }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
      "{{ eos_token }}{{ tools is none }}");
  ASSERT_TRUE(tmpl.ok());
  ChatRenderOptions o;
  o.eos_token = "</s>";
  auto text = tmpl->Render({{"user", "hi"}, {"assistant", "yo"}}, o);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "False<user>hi<assistant>yo</s>True");
  o.add_generation_prompt = true;
  o.bos_token = "<s>";
  text = tmpl->Render({{"user", "hi"}}, o);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "True<user>hi<a></s>True");
  EXPECT_FALSE(MessagesFromJson(R"({"role": "user"})").ok());
  EXPECT_FALSE(MessagesFromJson(R"([1, 2])").ok());
}

TEST(ChatTemplateTest, ContinuationAppendsOnlyTheNewTurn) {
  const std::string dir = std::string(CLUSTERKV_FIXTURES_DIR) + "/chat/";
  auto qwen =
      ChatTemplate::Parse(ReadAll(dir + "Qwen-Qwen2.5-7B-Instruct.jinja"));
  ASSERT_TRUE(qwen.ok());
  ChatRenderOptions o;
  o.eos_token = "<|im_end|>";
  o.add_generation_prompt = true;
  auto before = MessagesFromJson(
      R"([{"role": "user", "content": "Q1"},
          {"role": "assistant", "content": "A1"}])");
  auto after = MessagesFromJson(
      R"([{"role": "user", "content": "Q1"},
          {"role": "assistant", "content": "A1"},
          {"role": "user", "content": "Q2"}])");
  ASSERT_TRUE(before.ok() && after.ok());
  auto delta = qwen->RenderContinuation(*before, *after, o);
  ASSERT_TRUE(delta.ok()) << delta.status();
  EXPECT_EQ(*delta, "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n");
  // The prefix plus the delta is the full render.
  ChatRenderOptions no_prompt = o;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(*qwen->Render(*before, no_prompt) + *delta,
            *qwen->Render(*after, o));

  // Qwen3 drops the reasoning of earlier assistant turns: no extension.
  auto qwen3 = ChatTemplate::Parse(ReadAll(dir + "Qwen-Qwen3-0.6B.jinja"));
  ASSERT_TRUE(qwen3.ok());
  auto before3 = MessagesFromJson(
      R"([{"role": "user", "content": "Q1"},
          {"role": "assistant", "content": "<think>r</think>A1"}])");
  auto after3 = MessagesFromJson(
      R"([{"role": "user", "content": "Q1"},
          {"role": "assistant", "content": "<think>r</think>A1"},
          {"role": "user", "content": "Q2"}])");
  EXPECT_EQ(qwen3->RenderContinuation(*before3, *after3, o).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ckv::chat
