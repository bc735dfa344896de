#include "client/command_util.h"

#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/json_output.h"

namespace ckv::client {

pb::SamplingParams BuildSampling(const SamplingOptions& s) {
  pb::SamplingParams p;
#define CKV_SET(name, ...) \
  if (s.name) p.set_##name(*s.name);
  CKV_SAMPLING_NUMBERS(CKV_SET)
#undef CKV_SET
  for (const std::string& stop : s.stop) p.add_stop(stop);
  for (const auto& [id, bias] : s.logit_bias) {
    (*p.mutable_logit_bias())[id] = bias;
  }
  return p;
}

pb::KvConfig BuildKv(const KvOptions& kv) {
  pb::KvConfig c;
  if (!kv.policy.empty()) c.set_policy(kv.policy);
  if (!kv.gqa_selection.empty()) c.set_gqa_selection(kv.gqa_selection);
#define CKV_SET(name, ...) \
  if (kv.name) c.set_##name(*kv.name);
  CKV_KV_WIRE_NUMBERS(CKV_SET)
#undef CKV_SET
  return c;
}

pb::CreateSessionRequest BuildCreateSession(const ClientOptions& o) {
  pb::CreateSessionRequest request;
  *request.mutable_kv() = BuildKv(o.kv);
  *request.mutable_sampling() = BuildSampling(o.sampling);
  request.set_idle_ttl_seconds(o.idle_ttl_seconds);
  return request;
}

absl::StatusOr<std::unique_ptr<std::istream>> OpenFile(
    const std::string& path) {
  auto in = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*in)
    return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  return in;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  auto in = OpenFile(path);
  if (!in.ok()) return in.status();
  std::stringstream ss;
  ss << (*in)->rdbuf();
  return ss.str();
}

ProgressStyle ProgressStyleFor(const ClientOptions& o, const Io& io) {
  switch (o.progress) {
    case ProgressMode::kBar:
      return ProgressStyle::kBar;
    case ProgressMode::kLines:
      return ProgressStyle::kLines;
    case ProgressMode::kOff:
      return ProgressStyle::kOff;
    case ProgressMode::kAuto:
      break;
  }
  return io.err_is_tty ? ProgressStyle::kBar : ProgressStyle::kLines;
}

absl::StatusOr<pb::PrefillSummary> PrefillWithProgress(
    RpcClient& client, const std::string& session_id, std::istream& in,
    const ClientOptions& o, const Io& io) {
  Utf8ChunkReader reader(in, o.chunk_bytes);
  ProgressReporter progress(io.err, ProgressStyleFor(o, io));
  auto summary = client.Prefill(
      session_id, reader, o.add_bos, [&](const pb::PrefillProgress& p) {
        progress.Update(p.tokens_done(), p.tokens_total());
      });
  progress.Finish();
  return summary;
}

std::string FinishReasonName(pb::FinishReason reason) {
  switch (reason) {
    case pb::FINISH_REASON_LENGTH:
      return "length";
    case pb::FINISH_REASON_EOS:
      return "eos";
    case pb::FINISH_REASON_STOP:
      return "stop";
    default:
      break;
  }
  return "unspecified";
}

std::string DecodeSummaryLine(const pb::DecodeSummary& s) {
  return absl::StrFormat(
      "%d tokens | TTFT %.3f s | %.1f tok/s | total %.2f s | input %d tokens "
      "| finish %s",
      s.generated_tokens(), s.time_to_first_token_seconds(),
      s.tokens_per_second(), s.total_seconds(), s.input_tokens(),
      FinishReasonName(s.finish_reason()));
}

std::string PrefillSummaryLine(const pb::PrefillSummary& s) {
  return absl::StrFormat(
      "prefill: %d tokens in %.2f s (%.0f tok/s, queued %.2f s), "
      "%d clusters, session %d tokens in %d segments",
      s.prompt_tokens(), s.prefill_seconds(), s.tokens_per_second(),
      s.queue_seconds(), s.clusters_built(), s.session_tokens(), s.segments());
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (v >= 1024 && unit < 3) {
    v /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", v, kUnits[unit]);
}

std::string KeyValues(const google::protobuf::Message& m) {
  std::vector<std::string> parts;
  const nlohmann::json fields = ProtoToJson(m);
  for (const auto& [key, value] : fields.items()) {
    if (value.is_string() && value.get<std::string>().empty()) continue;
    const std::string text =
        value.is_string() ? value.get<std::string>() : value.dump();
    parts.push_back(absl::StrCat(key, "=", text));
  }
  return parts.empty() ? "(server defaults)" : absl::StrJoin(parts, " ");
}

std::string LogprobLine(const pb::TokenEvent& t) {
  std::string line = absl::StrFormat("logprob %9.4f %7d \"%s\"", t.logprob(),
                                     t.id(), absl::CHexEscape(t.text()));
  if (t.top_logprobs_size() > 0) absl::StrAppend(&line, "  top:");
  for (const pb::TokenLogprob& alt : t.top_logprobs()) {
    absl::StrAppend(
        &line, absl::StrFormat(" %d \"%s\" %.4f", alt.id(),
                               absl::CHexEscape(alt.piece()), alt.logprob()));
  }
  return line;
}

absl::StatusOr<int> StreamDecodeOutput(const DecodeCall& call,
                                       const std::string& name,
                                       nlohmann::json json_fields,
                                       const ClientOptions& o, const Io& io) {
  std::string text;
  nlohmann::json logprobs = nlohmann::json::array();
  std::vector<std::string> logprob_lines;
  auto summary = call([&](const pb::TokenEvent& t) {
    text += t.text();
    if (!o.json) io.out << t.text() << std::flush;
    if (!t.has_logprob()) return;
    if (o.json) {
      logprobs.push_back(ProtoToJson(t));
    } else {
      logprob_lines.push_back(LogprobLine(t));
    }
  });
  if (!summary.ok()) {
    if (!o.json && !text.empty()) io.out << std::endl;
    return summary.status();
  }
  if (o.json) {
    json_fields["text"] = summary->text().empty() ? text : summary->text();
    json_fields["summary"] = ProtoToJson(*summary);
    if (!logprobs.empty()) json_fields["tokens"] = std::move(logprobs);
    PrintJson(io, json_fields);
    return 0;
  }
  if (text.empty() || text.back() != '\n') io.out << '\n';
  io.out << std::flush;
  io.err << name << ": " << DecodeSummaryLine(*summary) << std::endl;
  for (const std::string& line : logprob_lines) io.err << line << "\n";
  io.err << std::flush;
  return 0;
}

void PrintJson(const Io& io, const nlohmann::json& j) {
  io.out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
         << std::endl;
}

}  // namespace ckv::client
