#include "server/http/choice_stream.h"

#include <atomic>
#include <utility>
#include <vector>

#include "server/http/openai_tools.h"

namespace ckv::server::http {
namespace {

std::string PiecesText(const std::vector<TokenPiece>& pieces) {
  std::string text;
  for (const TokenPiece& p : pieces) text += p.text;
  return text;
}

ChoiceOptions OptionsOf(const AnswerSpec& spec, int index) {
  ChoiceOptions o = spec.options;
  o.index = index;
  return o;
}

void CancelAll(const ChoiceJobs& jobs) {
  for (const auto& j : jobs) j->Cancel();
}

// One choice of a stream: its job, its text offset and tool calls so far.
struct StreamedChoice {
  std::shared_ptr<GenerationJob> job;
  ChoiceOptions options;
  chat::ToolCallSplitter splitter;
  int calls = 0;
  bool first = true;
  bool ended = false;
};

class SseSource final : public BodySource {
 public:
  SseSource(ChoiceJobs jobs, AnswerSpec spec)
      : jobs_(std::move(jobs)),
        spec_(std::move(spec)),
        tools_(spec_.tool_syntax != chat::ToolCallSyntax::kNone) {
    for (size_t i = 0; i < jobs_.size(); ++i) {
      choices_.push_back({jobs_[i], OptionsOf(spec_, static_cast<int>(i)),
                          chat::ToolCallSplitter(spec_.tool_syntax)});
    }
  }
  ~SseSource() override {
    if (!finished_) CancelAll(jobs_);
  }

  void SetWake(std::function<void()> wake) override {
    for (const auto& j : jobs_) j->SetListener(wake);
  }

  bool Pull(std::string* out) override {
    if (finished_) return true;
    bool all_ended = true;
    for (StreamedChoice& c : choices_) {
      if (!c.ended && !PullChoice(c, out)) {
        // A failed choice ends the stream.
        CancelAll(jobs_);
        return End(out);
      }
      all_ended = all_ended && c.ended;
    }
    if (!all_ended) return false;
    if (spec_.options.include_usage) {
      *out += SseEvent(UsageChunkBody(
          spec_.head,
          {spec_.prompt_tokens, completion_tokens_, spec_.cached_tokens}));
    }
    return End(out);
  }

  void Cancel() override { CancelAll(jobs_); }

 private:
  bool End(std::string* out) {
    *out += kSseDone;
    finished_ = true;
    return true;
  }

  // The choice's new pieces (and its end); false when it failed (its error
  // event written).
  bool PullChoice(StreamedChoice& c, std::string* out) {
    std::vector<TokenPiece> pieces;
    const bool done = c.job->Take(&pieces);
    if (tools_) {
      WriteEvents(c, c.splitter.Push(PiecesText(pieces)), out);
    } else if (!pieces.empty()) {
      *out += SseEvent(ChunkBody(spec_.head, pieces, c.first, c.options));
      if (c.first) c.options.text_offset += c.options.echo_text.size();
      for (const TokenPiece& p : pieces) c.options.text_offset += p.text.size();
      c.first = false;
    }
    if (!done) return true;
    c.ended = true;
    const JobResult& r = c.job->result();
    if (!r.status.ok()) {
      *out += SseEvent(ErrorBody(r.status));
      return false;
    }
    if (tools_) WriteEvents(c, c.splitter.Finish(), out);
    *out += SseEvent(ChunkBody(spec_.head, {}, c.first, c.options,
                               FinishReasonText(r.finish, c.calls)));
    completion_tokens_ += r.generated_tokens;
    return true;
  }

  // Content as content deltas, calls as delta.tool_calls chunks.
  void WriteEvents(StreamedChoice& c,
                   const std::vector<chat::ToolCallEvent>& events,
                   std::string* out) {
    for (const chat::ToolCallEvent& e : events) {
      if (!e.is_call) {
        ChoiceOptions o;
        o.index = c.options.index;
        std::vector<TokenPiece> pieces;
        if (!e.content.empty()) pieces.emplace_back().text = e.content;
        *out += SseEvent(ChunkBody(spec_.head, pieces, c.first, o));
      } else if (spec_.max_tool_calls == 0 || c.calls < spec_.max_tool_calls) {
        for (const std::string& chunk :
             ToolCallChunks(spec_.head, c.calls++, {NewToolCallId(), e.call},
                            c.first, c.options.index)) {
          *out += SseEvent(chunk);
        }
      }
      c.first = false;
    }
  }

  const ChoiceJobs jobs_;
  const AnswerSpec spec_;
  const bool tools_;
  std::vector<StreamedChoice> choices_;
  int64_t completion_tokens_ = 0;
  bool finished_ = false;
};

// One choice's body: its text, or its content and tool calls.
std::string ChoiceBody(const AnswerSpec& spec, int index,
                       const std::vector<TokenPiece>& pieces,
                       const JobResult& r, const Usage& usage) {
  const ChoiceOptions options = OptionsOf(spec, index);
  if (spec.tool_syntax == chat::ToolCallSyntax::kNone) {
    return CompletionBody(spec.head, pieces, FinishReasonText(r.finish), usage,
                          options);
  }
  chat::SplitOutput split =
      chat::SplitToolCalls(spec.tool_syntax, PiecesText(pieces));
  std::vector<ToolCallOut> calls;
  for (chat::ParsedToolCall& c : split.calls) {
    if (spec.max_tool_calls > 0 &&
        static_cast<int>(calls.size()) == spec.max_tool_calls) {
      break;
    }
    calls.push_back({NewToolCallId(), std::move(c)});
  }
  const std::string body =
      CompletionBody(spec.head, pieces,
                     FinishReasonText(r.finish, static_cast<int>(calls.size())),
                     usage, options);
  return WithToolCalls(body, split.content, calls);
}

// The non-streaming answer's state, shared by the jobs' listeners.
struct Answer {
  ChoiceJobs jobs;
  AnswerSpec spec;
  AnswerDone done;
  std::vector<std::vector<TokenPiece>> pieces;
  std::atomic<bool> scheduled{false};
  bool replied = false;  // I/O thread only

  // I/O thread: takes what arrived; answers once every job has ended or
  // one failed.
  void Collect() {
    scheduled.store(false);
    if (replied) return;
    bool all_done = true;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (!jobs[i]->Take(&pieces[i])) {
        all_done = false;
      } else if (!jobs[i]->result().status.ok()) {
        replied = true;
        CancelAll(jobs);
        return done(jobs[i]->result().status, nullptr);
      }
    }
    if (!all_done) return;
    replied = true;
    Usage usage{spec.prompt_tokens, 0, spec.cached_tokens};
    for (const auto& j : jobs) {
      usage.completion_tokens += j->result().generated_tokens;
    }
    std::vector<std::string> bodies;
    for (size_t i = 0; i < jobs.size(); ++i) {
      bodies.push_back(ChoiceBody(spec, static_cast<int>(i), pieces[i],
                                  jobs[i]->result(), usage));
    }
    done(bodies.size() == 1 ? bodies[0] : MergeChoices(bodies),
         &jobs[0]->result());
  }
};

}  // namespace

std::string FinishReasonText(FinishReason r, int tool_calls) {
  if (r == FinishReason::kLength) return "length";
  return tool_calls > 0 ? "tool_calls" : "stop";
}

std::shared_ptr<BodySource> ChoicesSseSource(ChoiceJobs jobs, AnswerSpec spec) {
  return std::make_shared<SseSource>(std::move(jobs), std::move(spec));
}

void WhenAnswered(std::shared_ptr<HttpExchange> ex, ChoiceJobs jobs,
                  AnswerSpec spec, AnswerDone done) {
  auto answer = std::make_shared<Answer>();
  answer->jobs = jobs;
  answer->spec = std::move(spec);
  answer->done = std::move(done);
  answer->pieces.resize(jobs.size());
  for (const auto& j : jobs) {
    // The listener holds the answer; the job drops its listener at its end.
    j->SetListener([ex, answer]() {
      if (!answer->scheduled.exchange(true)) {
        ex->Post([answer]() { answer->Collect(); });
      }
    });
  }
}

}  // namespace ckv::server::http
