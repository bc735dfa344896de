// Hostile templates end with a clear error (RESOURCE_EXHAUSTED for a limit,
// INVALID_ARGUMENT for bad input) instead of hanging, crashing or
// exhausting memory.
#include <string>

#include "gtest/gtest.h"
#include "model/chat/chat_template.h"

namespace ckv::chat {
namespace {

absl::Status RenderStatus(const std::string& source,
                          const TemplateLimits& limits = {}) {
  auto tmpl = ChatTemplate::Parse(source, limits);
  if (!tmpl.ok()) return tmpl.status();
  auto text = tmpl->Render(std::vector<ChatMessage>{{"user", "hi"}},
                           ChatRenderOptions{});
  return text.status();
}

void ExpectExhausted(const std::string& source,
                     const TemplateLimits& limits = {}) {
  const absl::Status s = RenderStatus(source, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted)
      << source << " -> " << s;
}

TEST(LimitsTest, OutputSize) {
  TemplateLimits limits;
  limits.max_output_bytes = 5000;
  const std::string loop = "{% for i in range(1000) %}0123456789{% endfor %}";
  ExpectExhausted(loop, limits);
  EXPECT_TRUE(RenderStatus(loop).ok());  // 10 KB is fine by default
}

TEST(LimitsTest, LoopIterations) {
  ExpectExhausted(
      "{% for i in range(200000) %}{% for j in range(200000) %}"
      "{% endfor %}{% endfor %}");
  ExpectExhausted("{{ range(1000000000000) | length }}");
  TemplateLimits limits;
  limits.max_loop_iterations = 10;
  ExpectExhausted("{% for i in range(11) %}{% endfor %}", limits);
  EXPECT_TRUE(
      RenderStatus("{% for i in range(10) %}{% endfor %}", limits).ok());
}

TEST(LimitsTest, GrowingValues) {
  // Doubling a string, a list, or a shared list structure.
  ExpectExhausted(
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
      "{% set ns.s = ns.s + ns.s %}{% endfor %}");
  ExpectExhausted(
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
      "{% set ns.l = ns.l + ns.l %}{% endfor %}");
  ExpectExhausted(
      "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
      "{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l | tojson }}");
  ExpectExhausted(
      "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
      "{% set ns.l = [ns.l] %}{% endfor %}");
  ExpectExhausted("{{ 'a' * 1000000000000 }}");
  ExpectExhausted("{{ [1, 2] * 1000000000000 }}");
  ExpectExhausted("{% set s = 'x' * 100000 %}{{ s.replace('', s) }}");
  ExpectExhausted(
      "{% set s = 'x' * 1000000 %}{{ (s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s) }}");
}

TEST(LimitsTest, WorkBudget) {
  TemplateLimits limits;
  limits.max_work = 10000;
  ExpectExhausted("{% for i in range(5000) %}{{ i }}{% endfor %}", limits);
}

TEST(LimitsTest, MacroRecursion) {
  ExpectExhausted("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_TRUE(
      RenderStatus("{% macro f(n) %}{% if n < 5 %}{{ f(n + 1) }}{% endif %}"
                   "{{ n }}{% endmacro %}{{ f(0) }}")
          .ok());
}

TEST(LimitsTest, DeepSourceIsASyntaxError) {
  for (const std::string& source :
       {"{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') +
            " }}",
        "{{ 1" +
            [] {
              std::string s;
              for (int i = 0; i < 100000; ++i) s += " + 1";
              return s;
            }() +
            " }}",
        "{{ " +
            [] {
              std::string s;
              for (int i = 0; i < 100000; ++i) s += "not ";
              return s;
            }() +
            "1 }}",
        "{{ [" + std::string(100000, '[') + std::string(100000, ']') + "] }}",
        [] {
          std::string s;
          for (int i = 0; i < 10000; ++i) s += "{% if 1 %}";
          return s;
        }()}) {
    const absl::Status s = RenderStatus(source);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << source.substr(0, 40) << " -> " << s;
  }
}

TEST(LimitsTest, IntegerOverflowIsAnError) {
  for (const char* source :
       {"{{ 2 ** 100 }}", "{{ 9223372036854775807 + 1 }}",
        "{{ -9223372036854775807 - 2 }}", "{{ 4611686018427387904 * 4 }}",
        "{{ (-9223372036854775807 - 1) // -1 }}"}) {
    EXPECT_EQ(RenderStatus(source).code(), absl::StatusCode::kInvalidArgument)
        << source;
  }
}

TEST(LimitsTest, NamespaceCyclesRenderFinitely) {
  auto tmpl = ChatTemplate::Parse(
      "{% set a = namespace() %}{% set b = namespace(a=a) %}"
      "{% set a.b = b %}{% set a.self = [a, b] %}{{ a }}");
  ASSERT_TRUE(tmpl.ok());
  auto text = tmpl->Render(std::vector<ChatMessage>{}, ChatRenderOptions{});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<Namespace {'b': <Namespace>, 'self': [<Namespace>, "
            "<Namespace>]}>");
}

TEST(LimitsTest, DeepMessagesAreRejected) {
  std::string json = "[{\"role\": \"user\", \"content\": ";
  json += std::string(1000, '[') + std::string(1000, ']') + "}]";
  EXPECT_EQ(MessagesFromJson(json).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ckv::chat
