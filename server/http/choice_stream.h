// The answer of a generation request from its choices' jobs (one, or n):
// server-sent events with the choices interleaved as their tokens arrive,
// or one body once every choice has ended. Content and tool calls per
// choice; usage counts the prompt once and sums the choices' tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/chat/tool_calls.h"
#include "server/http/choice_group.h"
#include "server/http/http_transport.h"
#include "server/http/openai_json.h"

namespace ckv::server::http {

struct AnswerSpec {
  ResponseHead head;
  ChoiceOptions options;  // choice i's: options with index i
  chat::ToolCallSyntax tool_syntax = chat::ToolCallSyntax::kNone;
  // Calls an answer returns (the first ones; later calls are dropped, the
  // content kept); 0: all. 1 for parallel_tool_calls: false.
  int max_tool_calls = 0;
  int64_t prompt_tokens = 0;  // cached ones included
  int64_t cached_tokens = 0;
};

// "stop", "length", or "tool_calls" for a stop with calls.
std::string FinishReasonText(FinishReason r, int tool_calls = 0);

// The events of the choices (jobs in index order): a chunk per choice per
// batch of pieces, each choice's last chunk with its finish reason, the
// usage chunk when asked, [DONE]; the first choice that fails ends the
// stream with an error event (the others cancelled). Pulled on the I/O
// thread; destroyed early (client gone), it cancels every job.
std::shared_ptr<BodySource> ChoicesSseSource(ChoiceJobs jobs, AnswerSpec spec);

// Not streaming: `done` runs once on the exchange's I/O thread with the
// whole body and choice 0's result once every job has ended, or with the
// first failure (the other jobs then cancelled).
using AnswerDone =
    std::function<void(absl::StatusOr<std::string> body, const JobResult* r)>;
void WhenAnswered(std::shared_ptr<HttpExchange> ex, ChoiceJobs jobs,
                  AnswerSpec spec, AnswerDone done);

}  // namespace ckv::server::http
