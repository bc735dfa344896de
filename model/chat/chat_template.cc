#include "model/chat/chat_template.h"

#include <utility>

#include "model/chat/lexer.h"
#include "model/chat/parser.h"

namespace ckv::chat {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source,
                                                 const TemplateLimits& limits) {
  if (static_cast<int64_t>(source.size()) > limits.max_output_bytes) {
    return absl::InvalidArgumentError("chat template too long");
  }
  auto tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  auto body = chat::Parse(*tokens, limits.max_nesting);
  if (!body.ok()) return body.status();
  return ChatTemplate(std::make_shared<const Body>(*std::move(body)), limits);
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const std::vector<ChatMessage>& messages,
    const ChatRenderOptions& options) const {
  List list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    Dict d;
    (void)d.Set(Value::String("role"), Value::String(m.role));
    (void)d.Set(Value::String("content"), Value::String(m.content));
    list.push_back(Value::MakeDict(std::move(d)));
  }
  return Render(Value::MakeList(std::move(list)), options);
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const Value& messages, const ChatRenderOptions& options) const {
  Dict context;
  (void)context.Set(Value::String("messages"), messages);
  (void)context.Set(Value::String("tools"), options.tools);
  (void)context.Set(Value::String("documents"), Value::None());
  (void)context.Set(Value::String("add_generation_prompt"),
                    Value::Bool(options.add_generation_prompt));
  if (options.bos_token.has_value()) {
    (void)context.Set(Value::String("bos_token"),
                      Value::String(*options.bos_token));
  }
  if (options.eos_token.has_value()) {
    (void)context.Set(Value::String("eos_token"),
                      Value::String(*options.eos_token));
  }
  return RenderContext(Value::MakeDict(std::move(context)), options.date);
}

absl::StatusOr<std::string> ChatTemplate::RenderContinuation(
    const Value& before, const Value& after,
    const ChatRenderOptions& options) const {
  ChatRenderOptions prefix_options = options;
  prefix_options.add_generation_prompt = false;
  auto prefix = Render(before, prefix_options);
  if (!prefix.ok()) return prefix.status();
  auto full = Render(after, options);
  if (!full.ok()) return full.status();
  if (full->compare(0, prefix->size(), *prefix) != 0) {
    return absl::FailedPreconditionError(
        "the chat template does not render the conversation as an extension "
        "of its earlier turns");
  }
  return full->substr(prefix->size());
}

absl::StatusOr<std::string> ChatTemplate::RenderContext(
    const Value& context, const TemplateDate& date) const {
  return RenderBody(*body_, context, limits_, date);
}

absl::StatusOr<Value> MessagesFromJson(std::string_view json_text) {
  auto v = ValueFromJson(json_text);
  if (!v.ok()) return v.status();
  if (!v->is_list()) {
    return absl::InvalidArgumentError("messages: expected a JSON list");
  }
  for (const Value& m : v->list()) {
    if (!m.is_dict()) {
      return absl::InvalidArgumentError(
          "messages: every item must be an object with role and content");
    }
  }
  return v;
}

}  // namespace ckv::chat
