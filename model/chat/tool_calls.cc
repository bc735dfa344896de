#include "model/chat/tool_calls.h"

#include <algorithm>
#include <utility>

#include "nlohmann/json.hpp"

namespace ckv::chat {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kGraniteOpen = "<|tool_call|>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
// Command R's <|START_ACTION|> lists use other keys and wrap answers in
// control tokens: not read (its templates mention "parameters").
constexpr std::string_view kCommandRAction = "<|START_ACTION|>";

// Calls as a JSON list after a marker that is a control token.
bool ListSyntax(ToolCallSyntax s) {
  return s == ToolCallSyntax::kMistral || s == ToolCallSyntax::kGranite;
}

std::string_view OpenMarker(ToolCallSyntax s) {
  switch (s) {
    case ToolCallSyntax::kHermes:
      return kHermesOpen;
    case ToolCallSyntax::kMistral:
      return kMistralOpen;
    case ToolCallSyntax::kGranite:
      return kGraniteOpen;
    default:
      return kPythonTag;
  }
}

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view StripSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t PartialMarker(std::string_view s, std::string_view marker) {
  const size_t most = std::min(s.size(), marker.size() - 1);
  for (size_t n = most; n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// {"name": string, <args_key>: object (or a string holding one)}.
bool CallOf(const OrderedJson& j, ParsedToolCall* call) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() ||
      name->get<std::string>().empty()) {
    return false;
  }
  const OrderedJson* args = nullptr;
  for (const char* key : {"arguments", "parameters"}) {
    if (auto it = j.find(key); it != j.end()) args = &*it;
  }
  if (args == nullptr) return false;
  OrderedJson value = *args;
  if (value.is_string()) {
    value = OrderedJson::parse(value.get<std::string>(), nullptr, false);
  }
  if (!value.is_object()) return false;
  call->name = name->get<std::string>();
  call->arguments =
      value.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  return true;
}

}  // namespace

ToolCallSyntax ToolCallSyntaxOf(std::string_view source) {
  if (Contains(source, kHermesOpen)) return ToolCallSyntax::kHermes;
  if (Contains(source, kMistralOpen)) return ToolCallSyntax::kMistral;
  if (Contains(source, kGraniteOpen)) return ToolCallSyntax::kGranite;
  if (Contains(source, kCommandRAction)) return ToolCallSyntax::kNone;
  if (Contains(source, kPythonTag) ||
      (Contains(source, "tools") && Contains(source, "\"parameters\""))) {
    return ToolCallSyntax::kLlama3Json;
  }
  return ToolCallSyntax::kNone;
}

const char* ToolCallSyntaxName(ToolCallSyntax syntax) {
  switch (syntax) {
    case ToolCallSyntax::kHermes:
      return "hermes";
    case ToolCallSyntax::kLlama3Json:
      return "llama3_json";
    case ToolCallSyntax::kMistral:
      return "mistral";
    case ToolCallSyntax::kGranite:
      return "granite";
    case ToolCallSyntax::kNone:
      break;
  }
  return "none";
}

void ToolCallSplitter::Emit(std::string text, std::vector<ToolCallEvent>* out) {
  held_space_ += text;
  // Trailing whitespace waits: dropped if a call follows, so that the
  // split does not depend on how the text was chunked.
  const size_t last = held_space_.find_last_not_of(" \n\t\r");
  if (last == std::string::npos) return;
  ToolCallEvent e;
  e.content = held_space_.substr(0, last + 1);
  held_space_.erase(0, last + 1);
  out->push_back(std::move(e));
  started_ = true;
}

bool ToolCallSplitter::ParseBody(std::string_view body,
                                 std::vector<ToolCallEvent>* out) {
  const OrderedJson j = OrderedJson::parse(body.begin(), body.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return false;
  std::vector<ParsedToolCall> calls;
  if (ListSyntax(syntax_)) {
    if (!j.is_array() || j.empty()) return false;
    for (const OrderedJson& c : j) {
      if (!CallOf(c, &calls.emplace_back())) return false;
    }
  } else if (!CallOf(j, &calls.emplace_back())) {
    return false;
  }
  held_space_.clear();  // whitespace around calls is not content
  for (ParsedToolCall& c : calls) {
    ToolCallEvent e;
    e.is_call = true;
    e.call = std::move(c);
    out->push_back(std::move(e));
    ++calls_;
  }
  started_ = true;
  return true;
}

bool ToolCallSplitter::CloseCall(std::vector<ToolCallEvent>* out) {
  if (syntax_ != ToolCallSyntax::kHermes) return false;  // ends with output
  const size_t end = call_.find(kHermesClose);
  if (end == std::string::npos) return false;
  const std::string body = call_.substr(0, end);
  std::string rest = call_.substr(end + kHermesClose.size());
  if (!ParseBody(body, out)) {
    Emit(marker_ + body + std::string(kHermesClose), out);
  }
  in_call_ = false;
  call_.clear();
  text_ = std::move(rest);
  return true;
}

void ToolCallSplitter::ScanText(std::vector<ToolCallEvent>* out) {
  while (!in_call_) {
    if (!started_ && syntax_ != ToolCallSyntax::kHermes) {
      // A bare call (Llama 3's JSON object; Mistral's or Granite's list
      // when its control-token marker was not rendered as text) is the whole
      // output: hold leading text until its first non-space byte says
      // whether it is one.
      const std::string_view s = StripSpace(text_);
      if (s.empty()) return;
      const bool list = ListSyntax(syntax_);
      const std::string_view open = OpenMarker(syntax_);
      if (list && s.size() < open.size() && open.substr(0, s.size()) == s) {
        return;  // maybe the marker as text
      }
      const bool marked = list && s.substr(0, open.size()) == open;
      const char bare = list ? '[' : '{';
      if (s.front() == bare && !marked) {
        const size_t at = text_.find(bare);
        in_call_ = true;
        marker_ = text_.substr(0, at);
        call_ = text_.substr(at);
        text_.clear();
        return;
      }
    }
    const std::string_view open = OpenMarker(syntax_);
    const size_t at = text_.find(open);
    if (at == std::string::npos) {
      const size_t keep = PartialMarker(text_, open);
      Emit(text_.substr(0, text_.size() - keep), out);
      text_.erase(0, text_.size() - keep);
      return;
    }
    Emit(text_.substr(0, at), out);
    in_call_ = true;
    marker_ = std::string(open);
    call_ = text_.substr(at + open.size());
    text_.clear();
    if (!CloseCall(out)) return;
  }
}

std::vector<ToolCallEvent> ToolCallSplitter::Push(std::string_view text) {
  std::vector<ToolCallEvent> out;
  if (syntax_ == ToolCallSyntax::kNone) {
    if (!text.empty()) out.push_back({false, std::string(text), {}});
    return out;
  }
  if (in_call_) {
    call_ += text;
    if (!CloseCall(&out)) return out;
  } else {
    text_ += text;
  }
  ScanText(&out);
  return out;
}

std::vector<ToolCallEvent> ToolCallSplitter::Finish() {
  std::vector<ToolCallEvent> out;
  if (in_call_) {
    // Hermes without its closing tag (some models end at EOS): a call if
    // the JSON is complete.
    if (!ParseBody(StripSpace(call_), &out)) Emit(marker_ + call_, &out);
    in_call_ = false;
    call_.clear();
  }
  Emit(std::move(text_), &out);
  text_.clear();
  if (calls_ == 0 && !held_space_.empty()) {
    out.push_back({false, std::move(held_space_), {}});
  }
  held_space_.clear();
  return out;
}

SplitOutput SplitToolCalls(ToolCallSyntax syntax, std::string_view text) {
  ToolCallSplitter splitter(syntax);
  std::vector<ToolCallEvent> events = splitter.Push(text);
  for (ToolCallEvent& e : splitter.Finish()) events.push_back(std::move(e));
  SplitOutput r;
  for (ToolCallEvent& e : events) {
    if (e.is_call) {
      r.calls.push_back(std::move(e.call));
    } else {
      r.content += e.content;
    }
  }
  return r;
}

}  // namespace ckv::chat
