#include "client/commands.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/connect.h"
#include "client/json_output.h"

namespace ckv::client {
namespace {

absl::Status UsageError(const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat(message, " (see clusterkv --help)"));
}

absl::StatusOr<std::string> ReadPrompt(const ClientOptions& o) {
  if (!o.prompt.empty() && !o.prompt_file.empty()) {
    return UsageError("generate: give --prompt or --prompt-file, not both");
  }
  if (!o.prompt_file.empty()) return ReadFile(o.prompt_file);
  if (o.prompt.empty()) {
    return UsageError("generate: --prompt or --prompt-file is required");
  }
  return o.prompt;
}

void PrintServerInfo(const pb::ServerInfo& s, const Io& io) {
  const pb::ModelInfo& m = s.model();
  const pb::Limits& l = s.limits();
  const pb::Capacity& c = s.capacity();
  io.out << absl::StrFormat(
      "model:    %s (%s), %d layers, dim %d, %d heads / %d KV heads, "
      "head_dim %d, vocab %d, context %d\n",
      m.name(), m.architecture(), m.layers(), m.dim(), m.heads(), m.kv_heads(),
      m.head_dim(), m.vocab_size(), m.context_length());
  if (!m.path().empty()) io.out << "path:     " << m.path() << "\n";
  io.out << absl::StrFormat(
      "server:   version %s, backend %s, kernels %s, %d threads%s\n",
      s.version(), s.backend(), s.kernels(), s.threads(),
      s.draining() ? ", DRAINING" : "");
  io.out << absl::StrFormat(
      "limits:   %d sessions, host KV %s, device KV %s, prompt %d tokens, "
      "session %d tokens, queue %d, idle TTL %d s\n",
      l.max_sessions(), FormatBytes(l.max_host_kv_bytes()),
      FormatBytes(l.max_device_kv_bytes()), l.max_prompt_tokens(),
      l.max_session_tokens(), l.max_queued_requests(),
      l.session_idle_ttl_seconds());
  io.out << absl::StrFormat(
      "capacity: %d free sessions, host KV %s free, device KV %s free, "
      "%d queued\n",
      c.free_sessions(), FormatBytes(c.free_host_kv_bytes()),
      FormatBytes(c.free_device_kv_bytes()), c.queued_requests());
  io.out << "kv:       " << KeyValues(s.default_kv()) << "\n";
}

}  // namespace

absl::StatusOr<int> RunGenerate(RpcClient& client, const ClientOptions& o,
                                const Io& io) {
  auto prompt = ReadPrompt(o);
  if (!prompt.ok()) return prompt.status();
  pb::GenerateRequest request;
  // The prompt as one user turn when the model has a chat template (the
  // server adds the assistant's opening); --raw sends the text as is.
  bool chat = false;
  if (!o.raw) {
    auto info = client.GetServerInfo();
    if (!info.ok()) return info.status();
    chat = info->has_chat_template();
  }
  if (chat) {
    pb::ChatMessage* m = request.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content(*prompt);
  } else {
    request.set_prompt(*prompt);
  }
  *request.mutable_kv() = BuildKv(o.kv);
  *request.mutable_sampling() = BuildSampling(o.sampling);
  if (o.add_bos) request.set_add_bos(*o.add_bos);
  return StreamDecodeOutput(
      [&](const TokenCallback& on_token) {
        return client.Generate(request, on_token);
      },
      "generate", nlohmann::json::object(), o, io);
}

absl::StatusOr<int> RunTokenize(RpcClient& client, const ClientOptions& o,
                                const Io& io) {
  if (o.text.empty() == o.file.empty()) {
    return UsageError("tokenize: give --text or --file");
  }
  pb::TokenizeRequest request;
  if (!o.file.empty()) {
    auto text = ReadFile(o.file);
    if (!text.ok()) return text.status();
    request.set_text(*text);
  } else {
    request.set_text(o.text);
  }
  request.set_add_special(o.add_special);
  request.set_parse_special(o.parse_special);
  request.set_with_pieces(o.json);
  auto response = client.Tokenize(request);
  if (!response.ok()) return response.status();
  if (o.json) {
    nlohmann::json j = ProtoToJson(*response);
    j["count"] = response->ids_size();
    PrintJson(io, j);
    return 0;
  }
  io.out << absl::StrJoin(response->ids(), " ") << "\n" << std::flush;
  io.err << "tokenize: " << response->ids_size() << " tokens" << std::endl;
  return 0;
}

// args: ["detokenize", ID...]; an argument may also be a comma- or
// space-separated list.
absl::StatusOr<int> RunDetokenize(RpcClient& client,
                                  const std::vector<std::string>& args,
                                  const ClientOptions& o, const Io& io) {
  pb::DetokenizeRequest request;
  for (size_t i = 1; i < args.size(); ++i) {
    for (absl::string_view part :
         absl::StrSplit(args[i], absl::ByAnyChar(", "), absl::SkipEmpty())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(part, &id)) {
        return UsageError(
            absl::StrCat("detokenize: '", part, "' is not a token id"));
      }
      request.add_ids(id);
    }
  }
  if (request.ids_size() == 0) return UsageError("detokenize: no token ids");
  request.set_render_special(o.render_special);
  auto response = client.Detokenize(request);
  if (!response.ok()) return response.status();
  if (o.json) {
    PrintJson(io, ProtoToJson(*response));
  } else {
    io.out << response->text() << "\n" << std::flush;
  }
  return 0;
}

absl::StatusOr<int> RunInfo(RpcClient& client, const ClientOptions& o,
                            const Io& io) {
  auto info = client.GetServerInfo();
  if (!info.ok()) return info.status();
  if (o.json) {
    PrintJson(io, ProtoToJson(*info));
  } else {
    PrintServerInfo(*info, io);
  }
  return 0;
}

absl::StatusOr<int> RunHealth(RpcClient& client, const ClientOptions& o,
                              const Io& io) {
  auto status = client.HealthCheck(o.service);
  if (!status.ok()) return status.status();
  const char* name = ServingStatusName(*status);
  if (o.json) {
    PrintJson(io, {{"service", o.service}, {"status", name}});
  } else {
    io.out << name << std::endl;
  }
  return *status == ServingStatus::kServing ? 0 : 1;
}

absl::StatusOr<int> RunCommand(const std::vector<std::string>& args,
                               const ClientOptions& o, const Io& io) {
  if (args.empty()) return UsageError("missing COMMAND");
  const std::string& cmd = args[0];
  const bool known = cmd == "generate" || cmd == "qa" || cmd == "session" ||
                     cmd == "info" || cmd == "health" || cmd == "tokenize" ||
                     cmd == "detokenize";
  if (!known) return UsageError(absl::StrCat("unknown command '", cmd, "'"));
  if (cmd != "session" && cmd != "detokenize" && args.size() > 1) {
    return UsageError(
        absl::StrCat(cmd, ": unexpected argument '", args[1], "'"));
  }
  auto connected = ConnectFrom(o);
  if (!connected.ok()) return connected.status();
  std::unique_ptr<RpcClient> client = *std::move(connected);
  if (cmd == "generate") return RunGenerate(*client, o, io);
  if (cmd == "qa") return RunQa(*client, o, io);
  if (cmd == "session") return RunSession(*client, args, o, io);
  if (cmd == "info") return RunInfo(*client, o, io);
  if (cmd == "tokenize") return RunTokenize(*client, o, io);
  if (cmd == "detokenize") return RunDetokenize(*client, args, o, io);
  return RunHealth(*client, o, io);
}

}  // namespace ckv::client
