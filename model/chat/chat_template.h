// Chat templates: renders a model's `tokenizer.chat_template` (Jinja2) the
// way Hugging Face transformers' apply_chat_template does, with a small
// Jinja interpreter (lexer.h, parser.h, interpreter.h) whose work is bounded
// by TemplateLimits.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/chat/ast.h"
#include "model/chat/interpreter.h"
#include "model/chat/limits.h"
#include "model/chat/value.h"

namespace ckv::chat {

struct ChatMessage {
  std::string role;
  std::string content;
};

// What apply_chat_template passes besides the messages.
struct ChatRenderOptions {
  bool add_generation_prompt = false;
  // nullopt: the tokenizer has no such token; the variable is undefined.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  TemplateDate date;  // what strftime_now() formats
  // The `tools` variable: None, or a list of OpenAI tool dicts
  // ({type: "function", function: {name, description, parameters}}), as
  // transformers' apply_chat_template(tools=...) passes them.
  Value tools = Value::None();
};

class ChatTemplate {
 public:
  // Parses `source`; INVALID_ARGUMENT on a syntax error or an unsupported
  // construct (see parser.h).
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source,
                                            const TemplateLimits& limits = {});

  // Renders with context {messages, tools (options.tools), documents: None,
  // add_generation_prompt, bos_token, eos_token}.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatRenderOptions& options) const;
  // Same with `messages` given as a value (a list of dicts, as parsed from
  // JSON by ValueFromJson; messages may carry more keys than role and
  // content).
  absl::StatusOr<std::string> Render(const Value& messages,
                                     const ChatRenderOptions& options) const;
  // For a session that remembers its conversation: the text to append to a
  // context that holds Render(before, add_generation_prompt=false) so that
  // it holds Render(after, options), where `after` extends `before` (e.g.
  // the previous turns plus the assistant's reply, then a new user turn).
  // FAILED_PRECONDITION when the template does not render `after` as an
  // extension of `before` (e.g. it drops earlier reasoning): the caller
  // must then prefill Render(after, options) from scratch.
  absl::StatusOr<std::string> RenderContinuation(
      const Value& before, const Value& after,
      const ChatRenderOptions& options) const;
  // Renders with exactly the variables of `context` (a dict).
  absl::StatusOr<std::string> RenderContext(const Value& context,
                                            const TemplateDate& date) const;

 private:
  ChatTemplate(std::shared_ptr<const Body> body, const TemplateLimits& limits)
      : body_(std::move(body)), limits_(limits) {}

  std::shared_ptr<const Body> body_;
  TemplateLimits limits_;
};

// Reads a JSON list of {"role", "content", ...} objects.
absl::StatusOr<Value> MessagesFromJson(std::string_view json_text);

}  // namespace ckv::chat
