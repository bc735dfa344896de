// model/chat/tool_calls.h: the tool-call syntax read from real templates
// (tests/fixtures/chat/), each family's parser on literal outputs, the
// streaming splitter fed byte by byte, and malformed calls kept as content.
#include "model/chat/tool_calls.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/chat/chat_template.h"

namespace ckv::chat {
namespace {

const std::filesystem::path kDir =
    std::filesystem::path(CLUSTERKV_FIXTURES_DIR) / "chat";

std::string Template(const std::string& name) {
  std::ifstream in(kDir / (name + ".jinja"));
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolCallSyntaxTest, PickedFromTheTemplatesMarkers) {
  EXPECT_EQ(ToolCallSyntaxOf(Template("Qwen-Qwen2.5-7B-Instruct")),
            ToolCallSyntax::kHermes);
  EXPECT_EQ(ToolCallSyntaxOf(Template("Qwen-Qwen3-0.6B")),
            ToolCallSyntax::kHermes);
  EXPECT_EQ(ToolCallSyntaxOf(Template("meta-llama-Llama-3.1-8B-Instruct")),
            ToolCallSyntax::kLlama3Json);
  EXPECT_EQ(ToolCallSyntaxOf(Template("mistralai-Mistral-Nemo-Instruct-2407")),
            ToolCallSyntax::kMistral);
  EXPECT_EQ(ToolCallSyntaxOf(Template("ibm-granite-granite-3.3-2B-Instruct")),
            ToolCallSyntax::kGranite);
  EXPECT_EQ(ToolCallSyntaxOf(Template("google-gemma-2-2b-it")),
            ToolCallSyntax::kNone);
  EXPECT_EQ(ToolCallSyntaxOf(
                Template("CohereForAI-c4ai-command-r7b-12-2024-tool_use")),
            ToolCallSyntax::kNone);
  EXPECT_EQ(ToolCallSyntaxOf(Template("HuggingFaceTB-SmolLM3-3B")),
            ToolCallSyntax::kNone);
}

TEST(ToolCallSplitTest, HermesCallsAfterContent) {
  const SplitOutput out = SplitToolCalls(
      ToolCallSyntax::kHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(out.content, "Let me look.");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Paris","days":2})");
  EXPECT_EQ(out.calls[1].name, "get_time");
  EXPECT_EQ(out.calls[1].arguments, "{}");
}

TEST(ToolCallSplitTest, Llama3JsonIsTheWholeOutput) {
  SplitOutput out = SplitToolCalls(
      ToolCallSyntax::kLlama3Json,
      " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, R"({"city":"Rome"})");
  // Text first: plain content, braces and all.
  out = SplitToolCalls(ToolCallSyntax::kLlama3Json, "Use {\"name\": 1}.");
  EXPECT_EQ(out.content, "Use {\"name\": 1}.");
  EXPECT_TRUE(out.calls.empty());
}

TEST(ToolCallSplitTest, MistralList) {
  const SplitOutput out = SplitToolCalls(
      ToolCallSyntax::kMistral,
      "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": "
      "\"abcdefghi\"}, {\"name\": \"b\", \"arguments\": \"{\\\"y\\\": 2}\"}]");
  EXPECT_EQ(out.content, "");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "a");
  EXPECT_EQ(out.calls[0].arguments, R"({"x":1})");
  EXPECT_EQ(out.calls[1].arguments, R"({"y":2})");  // a string holding JSON
  // The control token not rendered: the bare list is the call.
  const SplitOutput bare = SplitToolCalls(
      ToolCallSyntax::kMistral, R"( [{"name": "a", "arguments": {}}])");
  ASSERT_EQ(bare.calls.size(), 1u);
  EXPECT_EQ(bare.content, "");
  EXPECT_EQ(SplitToolCalls(ToolCallSyntax::kMistral, "[1] is a note").content,
            "[1] is a note");
}

TEST(ToolCallSplitTest, GraniteList) {
  SplitOutput out = SplitToolCalls(
      ToolCallSyntax::kGranite,
      R"(<|tool_call|>[{"name": "a", "arguments": {"x": [1, 2]}}])");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, R"({"x":[1,2]})");
  EXPECT_EQ(out.content, "");
  out = SplitToolCalls(ToolCallSyntax::kGranite,
                       R"([{"name": "b", "arguments": {}}])");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "b");
}

// Under tool_choice auto a malformed call is the answer's content.
TEST(ToolCallSplitTest, MalformedCallsAreContent) {
  for (const std::string text :
       {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\""}) {
    const SplitOutput out = SplitToolCalls(ToolCallSyntax::kHermes, text);
    EXPECT_TRUE(out.calls.empty()) << text;
    EXPECT_EQ(out.content, text);
  }
  const std::string bad = "[TOOL_CALLS][{\"name\": \"a\"}]";
  EXPECT_EQ(SplitToolCalls(ToolCallSyntax::kMistral, bad).content, bad);
  const std::string plain = "no calls <tool here";
  EXPECT_EQ(SplitToolCalls(ToolCallSyntax::kHermes, plain).content, plain);
}

// Byte by byte: content is released as soon as it cannot start a call;
// the result equals the whole-output split.
TEST(ToolCallSplitTest, StreamingByteByByteEqualsWhole) {
  const std::string text =
      "Hi <tool <tool_call>{\"name\": \"f\", \"arguments\": {\"q\": "
      "\"</tool\"}}</tool_call> after";
  ToolCallSplitter splitter(ToolCallSyntax::kHermes);
  std::string content;
  std::vector<ParsedToolCall> calls;
  bool released_early = false;
  for (size_t i = 0; i < text.size(); ++i) {
    for (const ToolCallEvent& e : splitter.Push(text.substr(i, 1))) {
      if (e.is_call) {
        calls.push_back(e.call);
      } else {
        content += e.content;
        if (i < 10) released_early = true;
      }
    }
  }
  for (const ToolCallEvent& e : splitter.Finish()) {
    if (e.is_call) calls.push_back(e.call);
    if (!e.is_call) content += e.content;
  }
  EXPECT_TRUE(released_early);
  const SplitOutput whole = SplitToolCalls(ToolCallSyntax::kHermes, text);
  EXPECT_EQ(content, whole.content);
  EXPECT_EQ(content, "Hi <tool after");  // the space before the call goes
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, R"({"q":"</tool"})");
}

// Random texts of markers, JSON pieces and prose, fed in random chunks:
// the same content and calls as the whole text, and with no call the text
// itself (nothing dropped).
TEST(ToolCallSplitTest, RandomChunkingMatchesWholeAndDropsNothing) {
  const std::vector<std::string> parts = {
      "<tool_call>",
      "</tool_call>",
      "{\"name\": \"f\", \"arguments\": {}}",
      "{\"name\": \"g\", \"parameters\": {\"a\": 1}}",
      "[TOOL_CALLS]",
      "<|tool_call|>",
      "[",
      "]",
      "{",
      "}",
      " ",
      "\n",
      "hi",
      "<tool",
      "</tool",
      "\"",
      ","};
  std::mt19937 rng(5);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < n; ++i) text += parts[rng() % parts.size()];
    for (ToolCallSyntax syntax :
         {ToolCallSyntax::kHermes, ToolCallSyntax::kLlama3Json,
          ToolCallSyntax::kMistral, ToolCallSyntax::kGranite,
          ToolCallSyntax::kNone}) {
      const SplitOutput whole = SplitToolCalls(syntax, text);
      if (whole.calls.empty()) {
        ASSERT_EQ(whole.content, text) << ToolCallSyntaxName(syntax);
      }
      ToolCallSplitter splitter(syntax);
      std::string content;
      std::vector<ParsedToolCall> calls;
      auto take = [&](std::vector<ToolCallEvent> events) {
        for (ToolCallEvent& e : events) {
          if (e.is_call) {
            calls.push_back(e.call);
          } else {
            content += e.content;
          }
        }
      };
      for (size_t at = 0; at < text.size();) {
        const size_t len = 1 + rng() % 5;
        take(splitter.Push(std::string_view(text).substr(at, len)));
        at += len;
      }
      take(splitter.Finish());
      ASSERT_EQ(content, whole.content) << text;
      ASSERT_EQ(calls.size(), whole.calls.size()) << text;
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(calls[i].name, whole.calls[i].name);
        EXPECT_EQ(calls[i].arguments, whole.calls[i].arguments);
      }
    }
  }
}

// The Qwen template renders `tools` and the history's tool calls (the
// arguments object through tojson) and tool responses.
TEST(ToolCallSplitTest, TemplateRendersToolsAndHistory) {
  auto tmpl = ChatTemplate::Parse(Template("Qwen-Qwen2.5-7B-Instruct"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  auto messages = ValueFromJson(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1",
      "type": "function", "function": {"name": "get_weather",
      "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}])");
  ASSERT_TRUE(messages.ok()) << messages.status();
  ChatRenderOptions options;
  options.add_generation_prompt = true;
  auto tools = ValueFromJson(
      R"([{"type": "function", "function": {"name": "get_weather",
          "parameters": {"type": "object"}}}])");
  ASSERT_TRUE(tools.ok());
  options.tools = *tools;
  auto text = tmpl->Render(*messages, options);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("<tools>\n{\"type\": \"function\", \"function\": "
                       "{\"name\": \"get_weather\", \"parameters\": "
                       "{\"type\": \"object\"}}}\n</tools>"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<tool_call>\n{\"name\": \"get_weather\", "
                       "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<tool_response>\nsunny\n</tool_response>"),
            std::string::npos)
      << *text;
}

}  // namespace
}  // namespace ckv::chat
