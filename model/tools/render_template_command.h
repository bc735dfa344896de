// `clusterkv-model render-template`: renders a chat template over a JSON
// list of messages, as transformers' apply_chat_template would.
#pragma once

#include "absl/status/status.h"

namespace ckv {

// Reads --template FILE.jinja (or --model X.gguf: its
// tokenizer.chat_template and bos/eos token texts), --messages FILE.json,
// --add-generation-prompt, --bos-token S, --eos-token S (override the
// model's) and --date YYYY-MM-DD (what strftime_now formats; default
// 2026-01-15 so renders are reproducible). Writes the rendered text to
// stdout exactly, without a newline.
absl::Status RunRenderTemplate();

}  // namespace ckv
