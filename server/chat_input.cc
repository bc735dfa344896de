#include "server/chat_input.h"

#include <ctime>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"
#include "server/limits.h"

namespace ckv::server {
namespace v1 = ::clusterkv::v1;
namespace {

// As for Prefill text: more bytes than this per allowed token cannot be a
// prompt within max_prompt_tokens.
constexpr int64_t kMaxBytesPerToken = 64;
constexpr size_t kMaxRoleBytes = 256;

bool ValidUtf8(const std::string& s) {
  return tokenizer_internal::FirstInvalidUtf8(s) == s.size();
}

// Today in the server's local time, as transformers' strftime_now sees it.
chat::TemplateDate Today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  chat::TemplateDate d;
  d.year = tm.tm_year + 1900;
  d.month = tm.tm_mon + 1;
  d.day = tm.tm_mday;
  return d;
}

std::optional<std::string> TokenTextOf(const Tokenizer& t, int32_t id) {
  if (id < 0) return std::nullopt;
  return std::string(t.TokenText(id));
}

}  // namespace

absl::StatusOr<std::vector<chat::ChatMessage>> ReadChatMessages(
    const v1::ChatMessages& wire, const ServerLimits& limits) {
  if (wire.messages_size() == 0) {
    return absl::InvalidArgumentError("messages: at least one is required");
  }
  if (wire.messages_size() > limits.max_chat_messages) {
    return LimitExceeded(
        Limit::kMaxChatMessages, limits.max_chat_messages,
        absl::StrCat("max_chat_messages limit exceeded: ", wire.messages_size(),
                     " messages, the limit is ", limits.max_chat_messages));
  }
  const int64_t max_bytes = limits.max_prompt_tokens * kMaxBytesPerToken;
  int64_t bytes = 0;
  std::vector<chat::ChatMessage> out;
  out.reserve(wire.messages_size());
  for (int i = 0; i < wire.messages_size(); ++i) {
    const v1::ChatMessage& m = wire.messages(i);
    if (m.role().empty() || m.role().size() > kMaxRoleBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages[", i, "].role must be 1..", kMaxRoleBytes, " bytes"));
    }
    if (!ValidUtf8(m.role())) {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "].role is not valid UTF-8"));
    }
    if (!ValidUtf8(m.content())) {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "].content is not valid UTF-8"));
    }
    bytes += static_cast<int64_t>(m.role().size() + m.content().size());
    if (bytes > max_bytes) {
      return LimitExceeded(
          Limit::kMaxPromptTokens, limits.max_prompt_tokens,
          absl::StrCat("max_prompt_tokens limit exceeded: the messages hold ",
                       bytes, " bytes, more than ", kMaxBytesPerToken,
                       " per allowed token"));
    }
    out.push_back({m.role(), m.content()});
  }
  return out;
}

ChatRenderer::ChatRenderer(const Model& model) {
  auto source = model.file->GetString("tokenizer.chat_template");
  if (!source.ok()) return;
  auto tmpl = chat::ChatTemplate::Parse(*source);
  if (!tmpl.ok()) {
    parse_error_ = std::string(tmpl.status().message());
    return;
  }
  tmpl_ = *std::move(tmpl);
  bos_ = TokenTextOf(*model.tokenizer, model.tokenizer->bos_id());
  eos_ = TokenTextOf(*model.tokenizer, model.tokenizer->eos_id());
}

absl::StatusOr<ChatTurn> ChatRenderer::Prepare(
    const Conversation& conv, int64_t session_tokens,
    std::vector<chat::ChatMessage> messages, bool add_generation_prompt) const {
  if (!tmpl_.has_value()) {
    return absl::FailedPreconditionError(
        parse_error_.empty()
            ? "model has no chat template; send text"
            : absl::StrCat("the model's chat template could not be parsed (",
                           parse_error_, "); send text"));
  }
  const bool continues = session_tokens > 0;
  if (continues && !conv.active) {
    return absl::FailedPreconditionError(
        "the session holds input that was not sent as chat messages (text, "
        "token ids, or a session restored from a snapshot): continue it "
        "with text, or start a new session with the whole conversation");
  }
  ChatTurn turn;
  turn.after.active = true;
  if (continues) turn.after.messages = conv.messages;
  for (chat::ChatMessage& m : messages) {
    turn.after.messages.push_back(std::move(m));
  }
  chat::ChatRenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.bos_token = bos_;
  options.eos_token = eos_;
  options.date = Today();
  auto full = tmpl_->Render(turn.after.messages, options);
  if (!full.ok()) return full.status();
  const absl::string_view held =
      continues ? absl::string_view(conv.text) : absl::string_view();
  if (!absl::StartsWith(*full, held)) {
    return absl::FailedPreconditionError(
        "the model's chat template does not render the conversation as an "
        "extension of what the session holds (it rewrites earlier turns): "
        "start a new session with the whole conversation");
  }
  turn.text = full->substr(held.size());
  turn.after.text = *std::move(full);
  return turn;
}

void ApplyConversationUpdate(const ConversationUpdate& update,
                             const JobResult& result,
                             const Tokenizer& tokenizer, Session& session) {
  Conversation& conv = session.conversation();
  const int64_t generated = static_cast<int64_t>(update.generated.size());
  if (!result.status.ok() && result.session_tokens == update.tokens_before) {
    return;  // rolled back
  }
  if (update.input == ConversationUpdate::Input::kRaw ||
      result.session_tokens !=
          update.tokens_before + update.input_tokens + generated) {
    conv = Conversation();  // the session no longer matches a render
    return;
  }
  if (update.input == ConversationUpdate::Input::kMessages) {
    conv = update.pending;
  }
  if (!conv.active || !update.generate) return;
  const std::string reply =
      tokenizer.Decode(update.generated, /*render_special=*/true);
  conv.text += reply;
  if (update.input == ConversationUpdate::Input::kNone && conv.reply_open &&
      !conv.messages.empty()) {
    conv.messages.back().content += reply;
  } else {
    conv.messages.push_back({"assistant", reply});  // even when empty
    conv.reply_open = true;
  }
}

}  // namespace ckv::server
