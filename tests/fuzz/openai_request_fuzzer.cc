// libFuzzer target: JSON request bodies of the OpenAI-compatible API
// (server/http/openai_json.h) turned into generation requests: byte 0
// picks the endpoint (bit 0: chat), the rest is the body. The parsed
// request goes through ApplySampling and the server's ValidateSampling; an
// error goes through ErrorBody; a request through the response builders.
//
// Checked invariants (violations trap): parsing fails only with
// INVALID_ARGUMENT and a message; every error body is a JSON object with
// the OpenAI error fields; a parsed request has messages (chat) or a
// prompt form, logprobs in range, and its sampling validates or fails with
// INVALID_ARGUMENT; built bodies are valid JSON. Chat with tools: the
// template's messages and tools are valid JSON, a forced call's grammar
// builds and compiles or fails with INVALID_ARGUMENT naming `tools`; the
// tool-call splitter, on the last message's content split at a point the
// input picks, gives what the whole text gives, and with no call returns
// the text unchanged (nothing dropped).
//
// Seeds: tests/fuzz/corpus/openai_request_fuzzer (scripts/fuzz.sh adds
// them).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "model/chat/tool_calls.h"
#include "model/grammar/matcher.h"
#include "nlohmann/json.hpp"
#include "server/http/openai_json.h"
#include "server/http/openai_tools.h"
#include "server/service_convert.h"

namespace {

namespace http = ckv::server::http;
using Json = nlohmann::json;

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckErrorBody(const std::string& body) {
  const Json j = Json::parse(body, nullptr, false);
  Check(j.is_object() && j.contains("error"));
  for (const char* key : {"message", "type", "param", "code"}) {
    Check(j["error"].contains(key));
  }
}

namespace chat = ckv::chat;

void CheckTools(const http::OpenAiRequest& r, size_t cut) {
  Check(!Json::parse(http::TemplateMessagesJson(r.messages), nullptr, false)
             .is_discarded());
  const std::string tools = http::TemplateToolsJson(r);
  Check(tools.empty() || Json::parse(tools, nullptr, false).is_array());
  for (chat::ToolCallSyntax syntax :
       {chat::ToolCallSyntax::kHermes, chat::ToolCallSyntax::kLlama3Json,
        chat::ToolCallSyntax::kMistral, chat::ToolCallSyntax::kGranite}) {
    auto g = http::ForcedToolGrammar(syntax, r);
    if (!g.ok()) {
      Check(g.status().code() == absl::StatusCode::kInvalidArgument);
      CheckErrorBody(http::ErrorBody(g.status()));
    } else if (g->has_value()) {
      auto compiled = ckv::grammar::CompileSpec(**g);
      Check(compiled.ok() ||
            compiled.status().code() == absl::StatusCode::kInvalidArgument);
    }
    const std::string& text = r.messages.back().content;
    const chat::SplitOutput whole = chat::SplitToolCalls(syntax, text);
    if (whole.calls.empty()) Check(whole.content == text);
    chat::ToolCallSplitter splitter(syntax);
    const size_t at = text.empty() ? 0 : cut % (text.size() + 1);
    std::vector<chat::ToolCallEvent> events = splitter.Push(text.substr(0, at));
    for (auto& e : splitter.Push(text.substr(at))) events.push_back(e);
    for (auto& e : splitter.Finish()) events.push_back(e);
    std::string content;
    size_t calls = 0;
    for (const chat::ToolCallEvent& e : events) {
      if (!e.is_call) {
        content += e.content;
        continue;
      }
      Check(calls < whole.calls.size());
      Check(e.call.name == whole.calls[calls].name);
      Check(e.call.arguments == whole.calls[calls].arguments);
      Check(Json::parse(e.call.arguments, nullptr, false).is_object());
      ++calls;
    }
    Check(calls == whole.calls.size());
    Check(content == whole.content);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const http::Endpoint endpoint =
      (data[0] & 1) ? http::Endpoint::kChat : http::Endpoint::kCompletions;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = http::ParseOpenAiRequest(body, endpoint);
  if (!r.ok()) {
    Check(r.status().code() == absl::StatusCode::kInvalidArgument);
    Check(!r.status().message().empty());
    CheckErrorBody(http::ErrorBody(r.status()));
    return 0;
  }
  if (endpoint == http::Endpoint::kChat) {
    Check(!r->messages.empty());
    CheckTools(*r, size);
    Check(r->logprobs >= -1 && r->logprobs <= 20);
  } else {
    Check(r->logprobs >= -1 && r->logprobs <= 5);
  }
  const ckv::SamplingParams s = http::ApplySampling(ckv::SamplingParams(), *r);
  const absl::Status valid = ckv::server::ValidateSampling(s, 259);
  if (!valid.ok()) {
    Check(valid.code() == absl::StatusCode::kInvalidArgument);
    CheckErrorBody(http::ErrorBody(valid));
  }
  const http::ResponseHead head{endpoint, "id", 1, "model"};
  std::vector<http::TokenPiece> pieces(1);
  pieces[0].token = 7;
  pieces[0].text = r->prompt.substr(0, 16);
  pieces[0].has_logprobs = r->logprobs >= 0;
  pieces[0].logprobs.logprob = -0.5f;
  const http::ChoiceOptions o = http::ChoiceOptionsOf(*r);
  Check(!Json::parse(http::CompletionBody(head, pieces, "stop", {1, 1}, o),
                     nullptr, false)
             .is_discarded());
  Check(!Json::parse(http::ChunkBody(head, pieces, true, o), nullptr, false)
             .is_discarded());
  return 0;
}
