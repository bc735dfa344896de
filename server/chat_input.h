// Chat messages on the wire -> the text a session appends, rendered with the
// model's own chat template (docs/wire-contract.md "Chat messages"), and
// the conversation a session remembers so that a follow-up call sends only
// its new turn(s).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clusterkv/v1/clusterkv.pb.h"
#include "model/chat/chat_template.h"
#include "model/model.h"
#include "server/engine_loop.h"
#include "server/server_config.h"
#include "server/session.h"

namespace ckv::server {

// Validates the wire messages: at least one; at most
// limits.max_chat_messages (RESOURCE_EXHAUSTED, Limit::kMaxChatMessages);
// roles non-empty and at most 256 bytes, roles and contents valid UTF-8
// (INVALID_ARGUMENT naming the message); contents together within the
// text bound of max_prompt_tokens (RESOURCE_EXHAUSTED, kMaxPromptTokens).
absl::StatusOr<std::vector<chat::ChatMessage>> ReadChatMessages(
    const clusterkv::v1::ChatMessages& wire, const ServerLimits& limits);

// What a call appends: `text` (tokenized with add_special = false,
// parse_special = true: the template writes BOS itself), and the session's
// conversation once that text is in it.
struct ChatTurn {
  std::string text;
  Conversation after;
};

// The model's template, parsed once at server start.
class ChatRenderer {
 public:
  // From tokenizer.chat_template and the bos/eos token texts of `model`.
  // A template that does not parse is logged by the caller through
  // parse_error() and treated as absent.
  explicit ChatRenderer(const Model& model);

  bool has_template() const { return tmpl_.has_value(); }
  // Why the model's template was refused ("" when it parsed or is absent).
  const std::string& parse_error() const { return parse_error_; }

  // The text to append to a session holding `session_tokens` tokens with
  // conversation `conv` so that it holds the render of conv.messages +
  // `messages` (with add_generation_prompt as given). An empty session
  // starts a new conversation. FAILED_PRECONDITION: no template; a
  // non-empty session whose tokens did not all come from messages; or a
  // template that does not render the longer conversation as an extension
  // of the text the session holds.
  absl::StatusOr<ChatTurn> Prepare(const Conversation& conv,
                                   int64_t session_tokens,
                                   std::vector<chat::ChatMessage> messages,
                                   bool add_generation_prompt) const;

 private:
  std::optional<chat::ChatTemplate> tmpl_;
  std::string parse_error_;
  std::optional<std::string> bos_, eos_;
};

// How a call changes a session's conversation, applied by the engine (just
// before the session is released) once the call's tokens are in it.
struct ConversationUpdate {
  enum class Input { kNone, kRaw, kMessages };
  Input input = Input::kNone;
  Conversation pending;            // kMessages: ChatTurn::after
  int64_t tokens_before = 0;       // session tokens when the call started
  int64_t input_tokens = 0;        // tokens the call appends before generating
  bool generate = false;           // Decode: the call generates a reply
  std::vector<int32_t> generated;  // streamed token ids (engine thread)
};

// Records the call on the session: nothing when the session was rolled back;
// the pending conversation plus, for a generating call, the reply: an
// assistant message (even empty) whose content is the text of the generated
// tokens, control tokens spelled out, a final end-of-generation token not
// included (exactly what the session holds); a Decode without input
// extends an open reply; raw input ends the conversation.
void ApplyConversationUpdate(const ConversationUpdate& update,
                             const JobResult& result,
                             const Tokenizer& tokenizer, Session& session);

}  // namespace ckv::server
