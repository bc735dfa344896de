// libFuzzer target: the chat-template interpreter (model/chat/) on arbitrary
// template text and messages.
//
// Input: byte 0 = flags (bit 0 add_generation_prompt, bit 1 bos_token,
// bit 2 eos_token, bit 3 messages from JSON); then the template text up to
// the first NUL byte; after it, the messages: a JSON list (flag bit 3) or
// else "role\x01content\x02role\x01content..." with arbitrary bytes.
//
// Checked invariants (violations trap): parse and render fail only with
// INVALID_ARGUMENT or RESOURCE_EXHAUSTED and a message; the output never
// exceeds the limit; rendering is deterministic.
//
// Seeds: when CLUSTERKV_FUZZ_SEED_DIR names a folder, LLVMFuzzerInitialize
// writes a few templates there (scripts/fuzz.sh also adds the fixture chat
// templates).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "model/chat/chat_template.h"

namespace {

using ckv::chat::ChatMessage;
using ckv::chat::ChatRenderOptions;
using ckv::chat::ChatTemplate;
using ckv::chat::TemplateLimits;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void CheckError(const absl::Status& s) {
  Check(s.code() == absl::StatusCode::kInvalidArgument ||
        s.code() == absl::StatusCode::kResourceExhausted);
}

TemplateLimits FuzzLimits() {
  TemplateLimits limits;  // small, so that each input runs fast
  limits.max_output_bytes = 1 << 16;
  limits.max_value_weight = 1 << 20;
  limits.max_loop_iterations = 5000;
  limits.max_work = 1'000'000;
  return limits;
}

std::vector<ChatMessage> SplitMessages(std::string_view text) {
  std::vector<ChatMessage> out;
  size_t start = 0;
  while (start <= text.size() && out.size() < 64) {
    size_t end = text.find('\x02', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    const size_t sep = item.find('\x01');
    out.push_back(sep == std::string_view::npos
                      ? ChatMessage{"user", std::string(item)}
                      : ChatMessage{std::string(item.substr(0, sep)),
                                    std::string(item.substr(sep + 1))});
    start = end + 1;
  }
  return out;
}

const char* const kSeeds[] = {
    "{% for m in messages %}{{ '<|' + m['role'] + '|>' + m.content | trim }}"
    "{% if loop.last and add_generation_prompt %}<a>{% endif %}{% endfor %}",
    "{%- set ns = namespace(n=0) -%}{% for m in messages[::-1] if m.role "
    "!= 'system' %}{% set ns.n = ns.n + 1 %}{{ m.content.split('x')[-1] }}"
    "{% endfor %}{{ ns.n }}{{ messages | tojson(indent=2) }}",
    "{% macro f(a, b='d') -%}\n  {{ a ~ b }}{%- endmacro %}{{ f(1) }}"
    "{{ bos_token }}{{ raise_exception('e') if messages|length > 3 }}",
    "{{ strftime_now('%B %d, %Y') }}{% for k, v in messages[0] | items %}"
    "{{ k }}={{ v | string | upper }}{% endfor %}",
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  const char* dir = std::getenv("CLUSTERKV_FUZZ_SEED_DIR");
  if (dir == nullptr || *dir == '\0') return 0;
  int i = 0;
  for (const char* seed : kSeeds) {
    const std::string path =
        std::string(dir) + "/chat_seed_" + std::to_string(i++);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) continue;  // the fuzzer still runs, just unseeded
    const std::string data = std::string("\x0f") + seed + std::string(1, '\0') +
                             R"([{"role": "system", "content": "s"},)"
                             R"({"role": "user", "content": "x\nü"}])";
    std::fwrite(data.data(), 1, data.size(), f);
    std::fclose(f);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1),
                              size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view source = rest.substr(0, nul);
  const std::string_view tail =
      nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);

  const TemplateLimits limits = FuzzLimits();
  auto tmpl = ChatTemplate::Parse(source, limits);
  if (!tmpl.ok()) {
    CheckError(tmpl.status());
    Check(!tmpl.status().message().empty());
    return 0;
  }
  ChatRenderOptions options;
  options.add_generation_prompt = (flags & 1) != 0;
  if (flags & 2) options.bos_token = "<s>";
  if (flags & 4) options.eos_token = "</s>";

  absl::StatusOr<std::string> first = absl::UnknownError("unset");
  absl::StatusOr<std::string> second = absl::UnknownError("unset");
  if (flags & 8) {
    auto messages = ckv::chat::MessagesFromJson(tail);
    if (!messages.ok()) {
      Check(messages.status().code() == absl::StatusCode::kInvalidArgument);
      return 0;
    }
    first = tmpl->Render(*messages, options);
    second = tmpl->Render(*messages, options);
  } else {
    const std::vector<ChatMessage> messages = SplitMessages(tail);
    first = tmpl->Render(messages, options);
    second = tmpl->Render(messages, options);
  }
  if (first.ok()) {
    Check(static_cast<int64_t>(first->size()) <= limits.max_output_bytes);
    Check(second.ok() && *first == *second);
  } else {
    CheckError(first.status());
    Check(!second.ok() && second.status() == first.status());
  }
  return 0;
}
