#include "model/tools/render_template_command.h"

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "model/chat/chat_template.h"
#include "model/gguf/gguf.h"

ABSL_FLAG(std::string, template, "",
          "render-template: the chat template file (Jinja)");
ABSL_FLAG(std::string, model, "",
          "render-template: a GGUF file whose tokenizer.chat_template and "
          "bos/eos tokens to use instead of --template");
ABSL_FLAG(std::string, messages, "",
          "render-template: JSON list of {\"role\", \"content\"} objects");
ABSL_FLAG(bool, add_generation_prompt, false,
          "render-template: end with the assistant turn's opening");
// Optional flags: absent (or given as "") leaves the model's token, or none.
ABSL_FLAG(std::optional<std::string>, bos_token, std::nullopt,
          "render-template: bos_token text");
ABSL_FLAG(std::optional<std::string>, eos_token, std::nullopt,
          "render-template: eos_token text");
ABSL_FLAG(std::string, date, "2026-01-15",
          "render-template: the date strftime_now() reports (YYYY-MM-DD)");

namespace ckv {
namespace {

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<chat::TemplateDate> ParseDate(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, '-');
  chat::TemplateDate d;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &d.year) ||
      !absl::SimpleAtoi(parts[1], &d.month) ||
      !absl::SimpleAtoi(parts[2], &d.day) || d.year < 1900 || d.year > 9999 ||
      d.month < 1 || d.month > 12 || d.day < 1 || d.day > 31) {
    return absl::InvalidArgumentError(
        absl::StrCat("--date must be YYYY-MM-DD, got '", text, "'"));
  }
  return d;
}

// The text of token `id_key` (e.g. tokenizer.ggml.bos_token_id), or nullopt
// when the file has none.
std::optional<std::string> TokenText(const gguf::GgufFile& file,
                                     const char* id_key) {
  auto id = file.GetInt(id_key);
  auto tokens = file.GetStringArray("tokenizer.ggml.tokens");
  if (!id.ok() || !tokens.ok() || *id < 0 ||
      *id >= static_cast<int64_t>((*tokens)->size())) {
    return std::nullopt;
  }
  return (**tokens)[*id];
}

// Template source and special tokens from --model.
absl::Status LoadFromModel(const std::string& path, std::string* source,
                           chat::ChatRenderOptions* options) {
  auto file = gguf::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  auto tmpl = (*file)->GetString("tokenizer.chat_template");
  if (!tmpl.ok()) {
    return absl::NotFoundError(
        absl::StrCat("'", path, "' has no tokenizer.chat_template"));
  }
  *source = *std::move(tmpl);
  options->bos_token = TokenText(**file, "tokenizer.ggml.bos_token_id");
  options->eos_token = TokenText(**file, "tokenizer.ggml.eos_token_id");
  return absl::OkStatus();
}

}  // namespace

absl::Status RunRenderTemplate() {
  const std::string template_path = absl::GetFlag(FLAGS_template);
  const std::string model_path = absl::GetFlag(FLAGS_model);
  if (template_path.empty() == model_path.empty()) {
    return absl::InvalidArgumentError(
        "render-template: give exactly one of --template and --model");
  }
  if (absl::GetFlag(FLAGS_messages).empty()) {
    return absl::InvalidArgumentError(
        "render-template: --messages is required");
  }
  chat::ChatRenderOptions options;
  std::string source;
  if (!model_path.empty()) {
    if (auto s = LoadFromModel(model_path, &source, &options); !s.ok()) {
      return s;
    }
  } else {
    auto text = ReadText(template_path);
    if (!text.ok()) return text.status();
    source = *std::move(text);
  }
  if (auto bos = absl::GetFlag(FLAGS_bos_token)) options.bos_token = *bos;
  if (auto eos = absl::GetFlag(FLAGS_eos_token)) options.eos_token = *eos;
  options.add_generation_prompt = absl::GetFlag(FLAGS_add_generation_prompt);
  auto date = ParseDate(absl::GetFlag(FLAGS_date));
  if (!date.ok()) return date.status();
  options.date = *date;

  auto json = ReadText(absl::GetFlag(FLAGS_messages));
  if (!json.ok()) return json.status();
  auto messages = chat::MessagesFromJson(*json);
  if (!messages.ok()) return messages.status();
  auto tmpl = chat::ChatTemplate::Parse(source);
  if (!tmpl.ok()) return tmpl.status();
  auto text = tmpl->Render(*messages, options);
  if (!text.ok()) return text.status();
  std::fwrite(text->data(), 1, text->size(), stdout);
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace ckv
