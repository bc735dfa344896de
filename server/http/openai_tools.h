// Tool calling on the OpenAI-compatible API (docs/http-api.md, "Tools"):
// the request's `tools`, `tool_choice` and the history's tool messages
// parsed; the chat template's context (messages and tools as transformers
// passes them); the grammar that forces a valid call for tool_choice
// "required" or a named function; and the tool_calls JSON of answers and
// chunks. No HTTP library and no engine here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/chat/tool_calls.h"
#include "model/grammar/matcher.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_json.h"

namespace ckv::server::http {

// Most tools one request may define.
inline constexpr size_t kMaxTools = 128;

// `tools` and `tool_choice` of a chat body (`body` parsed with key order
// kept). INVALID_ARGUMENT naming the field: tools not a list of
// {type: "function", function: {name, parameters?}} (names unique,
// [A-Za-z0-9_-]{1,64}), tool_choice not "auto" / "none" / "required" /
// {type: "function", function: {name}} naming one of the tools, or
// "required" / a name without tools, parallel_tool_calls not a boolean.
absl::Status ReadTools(const nlohmann::ordered_json& body, OpenAiRequest& r);

// An assistant message's `tool_calls` into `turn` (`field`: "messages.[i]").
absl::Status ReadToolCalls(const nlohmann::ordered_json& message,
                           const std::string& field, ChatTurn& turn);

// The template's `messages` as JSON text: {role, content} plus
// tool_calls [{id, type: "function", function: {name, arguments}}] (the
// arguments as an object when they are one, as transformers' templates
// expect) and tool_call_id / name of tool messages.
std::string TemplateMessagesJson(const std::vector<ChatTurn>& messages);
// The template's `tools` as JSON text (a list); "" when the request's
// tools are not rendered (none given, or tool_choice "none").
std::string TemplateToolsJson(const OpenAiRequest& r);

// Whether the request's answer is read for tool calls.
inline bool ToolsActive(const OpenAiRequest& r) {
  return !r.tools.empty() && r.tool_choice != ToolChoice::kNone;
}

// For tool_choice "required" or a named function: a GBNF that admits
// exactly one call in `syntax` of one of the (or the named) tools, its
// arguments following the tool's parameters schema. nullopt for "auto"
// and "none". INVALID_ARGUMENT (param "tools") when a schema is outside
// the supported JSON Schema subset.
absl::StatusOr<std::optional<grammar::ConstraintSpec>> ForcedToolGrammar(
    chat::ToolCallSyntax syntax, const OpenAiRequest& r);

// "call_" and 24 random letters and digits.
std::string NewToolCallId();

struct ToolCallOut {
  std::string id;
  chat::ParsedToolCall call;
};

// A chat.completion body (CompletionBody's) with its message's content
// and tool_calls replaced: content null when empty and there are calls.
std::string WithToolCalls(const std::string& body_json,
                          const std::string& content,
                          const std::vector<ToolCallOut>& calls);
// The streamed chunks of one call of choice `choice`: {index, id, type,
// function: {name, arguments: ""}} then {index, function: {arguments}}.
std::vector<std::string> ToolCallChunks(const ResponseHead& head, int index,
                                        const ToolCallOut& call, bool first,
                                        int choice = 0);

}  // namespace ckv::server::http
