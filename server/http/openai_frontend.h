// The OpenAI-compatible API's link to the engine: turns a parsed request
// and its session headers into a running GenerationJob on the same
// sessions, admission, limits, engine and metrics as the gRPC service
// (docs/http-api.md). No HTTP library here.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/chat/chat_template.h"
#include "model/chat/tool_calls.h"
#include "server/http/choice_group.h"
#include "server/http/generation_job.h"
#include "server/http/openai_json.h"
#include "server/service_state.h"

namespace ckv::server::http {

// The x-session-id value that asks for a new persistent session:
// "new", or "<routing key>.new" (the session id then starts with the key,
// so a proxy hashing on the key routes both calls alike).
inline constexpr char kNewSession[] = "new";

// How a request uses sessions (its headers).
struct SessionChoice {
  std::string session_id;  // x-session-id; empty: one-shot
  bool fork = false;       // x-session-fork: 1
};

struct StartedJob {
  // n == 1: the job. n > 1: null, and `group` prefills the prompt and then
  // runs the choices.
  std::shared_ptr<GenerationJob> job;
  std::shared_ptr<ChoiceGroup> group;
  // The request's prompt tokens (cached ones included), counted once.
  int64_t prompt_tokens = 0;
  // The persistent session the request ran in (the fork child when
  // forked); empty for a one-shot request.
  std::string session_id;
  // Prompt tokens reused from the prefix cache (one-shot requests).
  int64_t cached_tokens = 0;
  // How the answer is read for tool calls; kNone: all content.
  chat::ToolCallSyntax tool_syntax = chat::ToolCallSyntax::kNone;
};

class OpenAiFrontend {
 public:
  // `state` must have its backend set (the model is loaded) and outlive
  // this object. Reads the model's tokenizer.chat_template; one that does
  // not parse is logged and the raw rendering used.
  explicit OpenAiFrontend(ServiceState& state);

  // The id /v1/models lists: the model file's name without ".gguf".
  const std::string& model_id() const { return model_id_; }
  bool has_chat_template() const { return chat_template_.has_value(); }
  // The tool-call syntax the chat template teaches (kNone: no tools).
  chat::ToolCallSyntax tool_syntax() const { return tool_syntax_; }
  ServiceState& state() const { return state_; }

  // Validates, tokenizes, resolves the session (one-shot, new, existing or
  // forked) and submits (n > 1: the prefill of a ChoiceGroup, every
  // choice's KV admitted). Errors: NOT_FOUND for another model or an
  // unknown session, INVALID_ARGUMENT for bad input (param "n": n over
  // HttpConfig::max_choices, n > 1 with x-session-id, n choices that can
  // never fit the session or KV limits), RESOURCE_EXHAUSTED for limits,
  // ABORTED for a busy session, UNAVAILABLE while loading or draining.
  absl::StatusOr<StartedJob> Start(const std::string& tenant,
                                   const SessionChoice& choice,
                                   const OpenAiRequest& request) const;

  // The prompt text of a chat request (template or raw rendering), with
  // its tools when tool_choice is not "none". INVALID_ARGUMENT (param
  // "tools") for tools with a template that teaches no tool-call syntax.
  absl::StatusOr<std::string> RenderChat(const OpenAiRequest& request) const;

  // How the request's choice is written (log-probabilities with this
  // model's token bytes, echo).
  ChoiceOptions Options(const OpenAiRequest& request) const;
  // Tokens of context per sequence: --context-length, else the model
  // file's (0 while no model is loaded).
  int64_t context_length() const { return context_length_; }

  // llama.cpp's POST /tokenize {content, add_special, with_pieces} ->
  // {tokens: [id...] | [{id, piece}...]} and POST /detokenize {tokens} ->
  // {content}. INVALID_ARGUMENT (naming the field) for bad bodies.
  absl::StatusOr<std::string> Tokenize(absl::string_view body) const;
  absl::StatusOr<std::string> Detokenize(absl::string_view body) const;

 private:
  struct Target;  // the resolved session
  absl::StatusOr<Target> ResolveSession(const ServiceBackend& b,
                                        const std::string& tenant,
                                        const SessionChoice& choice) const;
  absl::StatusOr<std::vector<int32_t>> PromptTokens(
      const ServiceBackend& b, const OpenAiRequest& request,
      bool session_empty) const;
  // The request's sampling: its fields over the session's, a fresh random
  // seed when it names none, max_tokens checked against (and, when not
  // given, capped to) the context and session room, and its constraint
  // (response_format, grammar, or the forced tool call) compiled. 400 with
  // the OpenAI field for what can never fit or does not compile.
  absl::StatusOr<SamplingParams> Sampling(const ServiceBackend& b,
                                          const OpenAiRequest& request,
                                          const SessionLease& lease,
                                          int64_t input_tokens) const;

  // 400 (param "n") for an `n` this server never runs (see Start).
  absl::Status CheckChoices(const SessionChoice& choice,
                            const OpenAiRequest& request) const;
  // n > 1: admits every choice's KV, submits the prompt's prefill in the
  // one-shot session `spec` leases and returns the group that forks it.
  absl::StatusOr<StartedJob> StartGroup(const ServiceBackend& b,
                                        const OpenAiRequest& request,
                                        JobSpec spec,
                                        const AdmissionRequest& prompt,
                                        StartedJob started) const;
  // One ticket per choice for its generated tokens; 400 (param "n") when
  // the n choices together exceed a KV limit on an empty server.
  absl::StatusOr<std::vector<std::unique_ptr<AdmissionTicket>>> AdmitChoices(
      const ServiceBackend& b, int n, const AdmissionRequest& prompt,
      int64_t max_tokens) const;

  // The request's response_format / grammar, or the grammar of a forced
  // tool call, compiled into *sampling (400 naming the field).
  absl::Status ApplyConstraints(const ServiceBackend& b,
                                const OpenAiRequest& request,
                                SamplingParams* sampling) const;

  ServiceState& state_;
  std::string model_id_;
  int64_t context_length_ = 0;
  std::optional<chat::ChatTemplate> chat_template_;
  chat::ToolCallSyntax tool_syntax_ = chat::ToolCallSyntax::kNone;
  chat::ChatRenderOptions render_options_;
};

}  // namespace ckv::server::http
