// Tool calls in a model's output, in the syntax its chat template teaches:
//   Hermes / Qwen:  <tool_call>{"name": N, "arguments": {...}}</tool_call>
//                   (one or more, possibly after some text)
//   Llama 3.x JSON: {"name": N, "parameters": {...}} as the whole output,
//                   optionally after <|python_tag|>
//   Mistral:        [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]
//                   (also the list alone as the whole output: the marker
//                   is a control token, not rendered as text)
//   Granite:        <|tool_call|>[{"name": N, "arguments": {...}}, ...]
//                   (the same, its marker a control token too)
// The syntax is picked from the template's own markers (ToolCallSyntaxOf).
// ToolCallSplitter reads the output as it is generated and splits it into
// content and complete calls; a call that does not parse (bad JSON, no
// name, arguments not an object) is returned as content, never dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ckv::chat {

enum class ToolCallSyntax { kNone, kHermes, kLlama3Json, kMistral, kGranite };

// The syntax a chat template's source teaches: "<tool_call>" -> kHermes,
// "[TOOL_CALLS]" -> kMistral, "<|tool_call|>" -> kGranite, "<|python_tag|>"
// or a `"parameters"` JSON key beside `tools` -> kLlama3Json; kNone when
// the template does not render tools or teaches another syntax (Command
// R's <|START_ACTION|>).
ToolCallSyntax ToolCallSyntaxOf(std::string_view template_source);
const char* ToolCallSyntaxName(ToolCallSyntax syntax);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object, compact, keys in output order
};

// One piece of the split output, in output order: text, or a call.
struct ToolCallEvent {
  bool is_call = false;
  std::string content;  // !is_call
  ParsedToolCall call;  // is_call
};

class ToolCallSplitter {
 public:
  // kNone: everything is content, passed through as it comes.
  explicit ToolCallSplitter(ToolCallSyntax syntax) : syntax_(syntax) {}

  // Feeds generated text; returns what is known now: content that cannot
  // be (the start of) a call, and calls whose text is complete. Text that
  // may still become a call, and trailing whitespace, is held back (the
  // whitespace just before a call is dropped).
  std::vector<ToolCallEvent> Push(std::string_view text);
  // End of output: the held text, as a call when it parses as one,
  // otherwise as content. Trailing whitespace is dropped when the output
  // held a call.
  std::vector<ToolCallEvent> Finish();
  int calls() const { return calls_; }

 private:
  void Emit(std::string text, std::vector<ToolCallEvent>* out);
  void ScanText(std::vector<ToolCallEvent>* out);
  // In a call: closes it at the end marker; false while incomplete.
  bool CloseCall(std::vector<ToolCallEvent>* out);
  // The call text (after the start marker) as calls; false if malformed.
  bool ParseBody(std::string_view body, std::vector<ToolCallEvent>* out);

  ToolCallSyntax syntax_;
  bool in_call_ = false;
  std::string text_;        // held text outside a call
  std::string marker_;      // the start marker of the open call
  std::string call_;        // the open call's text after its marker
  std::string held_space_;  // trailing whitespace not yet emitted
  bool started_ = false;    // content or a call was emitted
  int calls_ = 0;
};

// The whole output at once: content (held whitespace included when there
// are no calls) and the calls.
struct SplitOutput {
  std::string content;
  std::vector<ParsedToolCall> calls;
};
SplitOutput SplitToolCalls(ToolCallSyntax syntax, std::string_view text);

}  // namespace ckv::chat
