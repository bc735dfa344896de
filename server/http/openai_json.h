// The JSON of the OpenAI-compatible HTTP API (docs/http-api.md): request
// bodies of /v1/completions and /v1/chat/completions parsed into a typed
// struct, and the response, chunk, model-list and error bodies. No HTTP
// library and no engine here, so every rule is testable on strings.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/grammar/matcher.h"
#include "model/sampler.h"

namespace ckv::server::http {

enum class Endpoint { kCompletions, kChat };

// Text the engine produced for one token (token -1: text held back until
// the end and released with no token), with its log-probabilities when the
// request asked for them.
struct TokenPiece {
  int32_t token = -1;
  std::string text;
  bool has_logprobs = false;
  TokenLogprobs logprobs;
};

// An assistant message's tool call in the history (OpenAI's
// {id, type: "function", function: {name, arguments}}).
struct ToolCallIn {
  std::string id;
  std::string name;
  std::string arguments;  // as sent: JSON text (an object) or any string
};

struct ChatTurn {
  std::string role;
  std::string content;
  std::vector<ToolCallIn> tool_calls;  // assistant
  std::string tool_call_id;            // tool
  std::string name;                    // tool (optional)
};

// One entry of `tools`: {type: "function", function: {name, description,
// parameters}}.
struct ToolDef {
  std::string name;
  std::string json;        // the whole entry, keys in the order sent
  std::string parameters;  // the parameters schema as JSON text; "" none
};

// tool_choice: "auto" (the default with tools), "none", "required", or
// {type: "function", function: {name}} (kNamed).
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

// One request body. Fields OpenAI defines that this server does not
// implement are ignored when absent or at their neutral value (see
// ParseOpenAiRequest); unknown fields are ignored.
struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // required by OpenAI; checked against /v1/models
  // /v1/completions: a string, or token ids (has_prompt_ids).
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  bool has_prompt_ids = false;
  std::vector<ChatTurn> messages;  // /v1/chat/completions
  // Choices to sample (>= 1; the cap, HttpConfig::max_choices, is checked
  // by OpenAiFrontend).
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::optional<int> max_tokens;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<uint64_t> seed;
  std::optional<std::vector<std::string>> stop;
  // Chat: logprobs (bool) and top_logprobs (0..20); completions: logprobs
  // (0..5, the top count) and echo. -1: no log-probabilities.
  int logprobs = -1;
  bool echo = false;
  // response_format (json_object, json_schema) or grammar (GBNF);
  // constraint_param names the field for errors.
  std::optional<grammar::ConstraintSpec> constraint;
  std::string constraint_param;
  // Chat: tools and tool_choice (server/http/openai_tools.h).
  std::vector<ToolDef> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kNamed
  // parallel_tool_calls: false keeps an answer to its first call.
  bool parallel_tool_calls = true;
};

// Nesting deeper than this (objects and arrays) is refused before parsing.
inline constexpr int kMaxJsonDepth = 32;

// INVALID_ARGUMENT naming the field for: a body that is not JSON (or holds
// invalid UTF-8), deeper than kMaxJsonDepth or not an object; a field of
// the wrong type or out of range; `n` not an integer >= 1; more than one
// prompt;
// a chat request without messages; response_format or grammar malformed
// (param "response_format" / "grammar"; they are compiled later, by
// OpenAiFrontend); tools, tool_choice or a message's tool_calls malformed.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body,
                                                 Endpoint endpoint);

// `base` with the request's max_tokens, temperature, top_p, seed, stop and
// logprobs applied (not validated: ValidateSampling does that).
SamplingParams ApplySampling(const SamplingParams& base,
                             const OpenAiRequest& r);

// Raw rendering of a conversation for a model without a chat template:
// "role: content\n" per message, then "assistant:" (the generation prompt).
std::string RenderRawConversation(const std::vector<ChatTurn>& messages);

// ---- errors ---------------------------------------------------------------

// The HTTP status of a status code: INVALID_ARGUMENT, OUT_OF_RANGE and
// FAILED_PRECONDITION 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403,
// NOT_FOUND 404, ABORTED (session busy) 409, RESOURCE_EXHAUSTED 429,
// UNAVAILABLE 503, CANCELLED 499, anything else 500.
int HttpStatusOf(absl::StatusCode code);
// As HttpStatusOf, but a limit no retry can meet (max_prompt_tokens,
// max_session_tokens, max_chat_messages) is 400: the request must change.
int HttpStatusFor(const absl::Status& status);
// {"error": {"message", "type", "param", "code"}}: type from the HTTP status
// ("invalid_request_error", "authentication_error", "not_found_error",
// "rate_limit_error", ...), code the lower-case status code name or, for a
// limit rejection, the limit's name (e.g. "max_sessions"). `param`: the
// offending field or null.
std::string ErrorBody(const absl::Status& status, absl::string_view param = "",
                      absl::string_view code = "");
// INVALID_ARGUMENT naming `param` (the OpenAI field) for ErrorBody, with
// `code` ("context_length_exceeded", ...) when not empty.
absl::Status FieldError(absl::string_view param, absl::string_view message,
                        absl::string_view code = "");
// Seconds a client should wait before retrying a status (429: a limit that
// frees up; 503); nullopt when retrying cannot help.
std::optional<int> RetryAfterSeconds(const absl::Status& status);

// ---- responses --------------------------------------------------------------

std::string ModelsBody(absl::string_view model_id, int64_t created);
std::string ModelBody(absl::string_view model_id, int64_t created);

// The shared fields of a response and its chunks.
struct ResponseHead {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

struct Usage {
  int64_t prompt_tokens = 0;  // cached ones included
  int64_t completion_tokens = 0;
  // Prompt tokens reused from the prefix cache (prompt_tokens_details).
  int64_t cached_tokens = 0;
};

// How a choice is written: log-probabilities (OpenAI's chat shape
// {content: [{token, logprob, bytes, top_logprobs}]} or the completions
// shape {tokens, token_logprobs, top_logprobs, text_offset}) and echo.
struct ChoiceOptions {
  int logprobs = -1;  // -1: none; else the top count
  int index = 0;      // the choice's index (n > 1)
  bool include_usage = false;
  std::string echo_text;    // completions with echo: the prompt
  int64_t text_offset = 0;  // streaming: text bytes sent before this chunk
  // The bytes of a token id (for top_logprobs); null: ids are written.
  std::function<std::string(int32_t)> token_bytes;
};
ChoiceOptions ChoiceOptionsOf(const OpenAiRequest& r);

// A whole (non-streaming) response: one choice with `text` (index 0), or
// with `pieces` at options.index.
std::string CompletionBody(const ResponseHead& head, absl::string_view text,
                           absl::string_view finish_reason, const Usage& usage);
std::string CompletionBody(const ResponseHead& head,
                           const std::vector<TokenPiece>& pieces,
                           absl::string_view finish_reason, const Usage& usage,
                           const ChoiceOptions& options);
// One streamed chunk of choice options.index (0 for the text form): delta
// `text` (chat: with role "assistant" when `first`), finish_reason null
// unless given.
std::string ChunkBody(const ResponseHead& head, absl::string_view text,
                      bool first, absl::string_view finish_reason = "");
std::string ChunkBody(const ResponseHead& head,
                      const std::vector<TokenPiece>& pieces, bool first,
                      const ChoiceOptions& options,
                      absl::string_view finish_reason = "");
// The bodies of one response's choices (each a CompletionBody, possibly
// with WithToolCalls) as one body: the first with every body's choices.
std::string MergeChoices(const std::vector<std::string>& bodies);
// The usage chunk of stream_options.include_usage (choices empty).
std::string UsageChunkBody(const ResponseHead& head, const Usage& usage);
// "data: <json>\n\n"
std::string SseEvent(absl::string_view json);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

}  // namespace ckv::server::http
