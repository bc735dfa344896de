#include "server/service_convert.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/unknown_field_set.h"
#include "kernels/cpu/ops.h"
#include "model/grammar/matcher.h"
#include "model/grammar/token_index.h"
#include "model/kv/policies/registry.h"
#include "server/log_text.h"

#ifndef CLUSTERKV_VERSION
#define CLUSTERKV_VERSION "dev"
#endif

namespace ckv::server {

namespace {

using settings::kMaxStopBytes;
using settings::kMaxStopStrings;

absl::Status CheckRange(absl::string_view field, int64_t value, int64_t lo,
                        int64_t hi) {
  const std::string error = settings::OutOfRange(
      std::string_view(field.data(), field.size()), static_cast<double>(value),
      settings::Between(static_cast<double>(lo), static_cast<double>(hi)),
      /*integral=*/true);
  if (error.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(error);
}

// The request limits: each numeric setting in its whole schema range (the
// engine's own checks lift the token-count limit, kMaxTokenSetting).
absl::Status CheckRequestRanges(const KvStoreConfig& kv) {
#define CKV_CHECK(name, type, range, ...)                                 \
  if (const std::string e =                                               \
          settings::OutOfRange("kv." #name, static_cast<double>(kv.name), \
                               range, !std::is_floating_point_v<type>);   \
      !e.empty()) {                                                       \
    return absl::InvalidArgumentError(e);                                 \
  }
  CKV_KV_WIRE_NUMBERS(CKV_CHECK)
#undef CKV_CHECK
  return absl::OkStatus();
}

absl::Status CheckRequestRanges(const SamplingParams& s) {
#define CKV_CHECK(name, type, range, ...)                                      \
  if (const std::string e =                                                    \
          settings::OutOfRange("sampling." #name, static_cast<double>(s.name), \
                               range, !std::is_floating_point_v<type>);        \
      !e.empty() &&                                                            \
      !(std::string_view(#name) == "logprobs" && s.logprobs == -1)) {          \
    return absl::InvalidArgumentError(e);                                      \
  }
  CKV_SAMPLING_NUMBERS(CKV_CHECK)
#undef CKV_CHECK
  return absl::OkStatus();
}

std::string PolicyNames() {
  return JoinPolicyNames(", ", /*with_evaluation_only=*/false);
}

// A set field whose value is not one of `accepted` (empty included).
absl::Status NotOneOf(absl::string_view field, absl::string_view value,
                      const std::string& accepted) {
  if (value.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is set but empty; accepted values: ", accepted));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " '", EscapeText(value, kQuotedPrefixBytes),
                   "' is unknown; accepted values: ", accepted));
}

}  // namespace

absl::Status RejectMistypedFields(const google::protobuf::Message& m,
                                  absl::string_view prefix) {
  const auto& unknown = m.GetReflection()->GetUnknownFields(m);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const auto* field =
        m.GetDescriptor()->FindFieldByNumber(unknown.field(i).number());
    if (field == nullptr) continue;  // a newer client's field: ignored
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ".", field->name(), " (field ", field->number(),
        ") has the wrong wire type for a ", field->cpp_type_name()));
  }
  return absl::OkStatus();
}

absl::Status ValidateSampling(const SamplingParams& s, int vocab_size) {
  if (auto st = CheckRequestRanges(s); !st.ok()) return st;
  if (auto st =
          CheckRange("number of sampling.stop strings",
                     static_cast<int64_t>(s.stop.size()), 0, kMaxStopStrings);
      !st.ok()) {
    return st;
  }
  for (const std::string& stop : s.stop) {
    if (auto st =
            CheckRange("sampling.stop string bytes",
                       static_cast<int64_t>(stop.size()), 1, kMaxStopBytes);
        !st.ok()) {
      return st;
    }
  }
  return ValidateSamplingParams(s, vocab_size);
}

absl::StatusOr<KvStoreConfig> MergeKvConfig(const KvStoreConfig& base,
                                            const v1::KvConfig& p,
                                            int model_layers) {
  if (auto s = RejectMistypedFields(p, "kv"); !s.ok()) return s;
  KvStoreConfig kv = base;
  // A server default beyond this model's layers means every layer.
  kv.dense_layers = std::min(kv.dense_layers, model_layers);
  if (p.has_policy()) {
    // Evaluation-only policies (oracle) are for clusterkv-model recall and
    // the benchmarks, not for serving.
    auto policy = ParseServedKvPolicy(p.policy());
    if (!policy.ok()) {
      return NotOneOf("kv.policy", p.policy(), PolicyNames());
    }
    kv.policy = *policy;
  }
  if (p.has_gqa_selection()) {
    auto gqa = ParseGqaSelection(p.gqa_selection());
    if (!gqa.ok()) {
      return NotOneOf("kv.gqa_selection", p.gqa_selection(),
                      settings::JoinNames(settings::kGqaSelectionNames, ", "));
    }
    kv.gqa_selection = *gqa;
  }
#define CKV_MERGE(name, ...) \
  if (p.has_##name()) kv.name = p.name();
  CKV_KV_WIRE_NUMBERS(CKV_MERGE)
#undef CKV_MERGE
  if (auto s = CheckRequestRanges(kv); !s.ok()) return s;
  if (auto s = ValidateKvStoreConfig(kv, model_layers); !s.ok()) return s;
  return kv;
}

absl::StatusOr<SamplingParams> MergeSampling(const SamplingParams& base,
                                             const v1::SamplingParams& p,
                                             int vocab_size,
                                             const Tokenizer* tokenizer) {
  if (auto s = RejectMistypedFields(p, "sampling"); !s.ok()) return s;
  // logprobs: unset is "off" (-1 in SamplingParams), a negative one is out
  // of range.
  if (p.has_logprobs() && p.logprobs() < 0) {
    return CheckRange("sampling.logprobs", p.logprobs(), 0, kMaxLogprobs);
  }
  SamplingParams s = base;
#define CKV_MERGE(name, ...) \
  if (p.has_##name()) s.name = p.name();
  CKV_SAMPLING_NUMBERS(CKV_MERGE)
#undef CKV_MERGE
  if (p.stop_size() > 0) s.stop.assign(p.stop().begin(), p.stop().end());
  if (p.logit_bias_size() > 0) {
    s.logit_bias.clear();
    for (const auto& [id, bias] : p.logit_bias()) s.logit_bias[id] = bias;
  }
  if (p.has_constraint()) {
    if (tokenizer == nullptr) {
      return absl::InvalidArgumentError(
          "sampling.constraint applies to one generation request (Decode, "
          "Generate), not to a session's defaults");
    }
    auto spec = ConstraintFromProto(p.constraint());
    if (!spec.ok()) return spec.status();
    auto c =
        grammar::CompileConstraint(*spec, grammar::TokenIndex::For(*tokenizer));
    if (!c.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling.constraint: ", c.status().message()));
    }
    s.constraint = *std::move(c);
  }
  if (auto st = ValidateSampling(s, vocab_size); !st.ok()) return st;
  return s;
}

absl::StatusOr<grammar::ConstraintSpec> ConstraintFromProto(
    const v1::Constraint& c) {
  if (auto s = RejectMistypedFields(c, "sampling.constraint"); !s.ok()) {
    return s;
  }
  switch (c.kind_case()) {
    case v1::Constraint::kGbnf:
      return grammar::ConstraintSpec{grammar::ConstraintSpec::kGbnf, c.gbnf()};
    case v1::Constraint::kJsonSchema:
      return grammar::ConstraintSpec{grammar::ConstraintSpec::kJsonSchema,
                                     c.json_schema()};
    case v1::Constraint::kJsonObject:
      if (c.json_object()) {
        return grammar::ConstraintSpec{grammar::ConstraintSpec::kJsonObject,
                                       ""};
      }
      break;
    case v1::Constraint::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "sampling.constraint is set but holds none of gbnf, json_schema, "
      "json_object: true");
}

void ToProto(const KvStoreConfig& kv, v1::KvConfig* out) {
  out->set_policy(KvPolicyName(kv.policy));
  out->set_gqa_selection(GqaSelectionName(kv.gqa_selection));
#define CKV_SET(name, ...) out->set_##name(kv.name);
  CKV_KV_WIRE_NUMBERS(CKV_SET)
#undef CKV_SET
}

void ToProto(const SamplingParams& s, v1::SamplingParams* out) {
#define CKV_SET(name, ...) out->set_##name(s.name);
  CKV_SAMPLING_NUMBERS(CKV_SET)
#undef CKV_SET
  if (s.logprobs < 0) out->clear_logprobs();  // off
  for (const std::string& stop : s.stop) out->add_stop(stop);
  for (const auto& [id, bias] : s.logit_bias) {
    (*out->mutable_logit_bias())[id] = bias;
  }
  if (s.constraint != nullptr) {
    const grammar::ConstraintSpec& spec = s.constraint->spec;
    v1::Constraint* c = out->mutable_constraint();
    switch (spec.kind) {
      case grammar::ConstraintSpec::kGbnf:
        c->set_gbnf(spec.text);
        break;
      case grammar::ConstraintSpec::kJsonSchema:
        c->set_json_schema(spec.text);
        break;
      case grammar::ConstraintSpec::kJsonObject:
        c->set_json_object(true);
        break;
    }
  }
}

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kCancelled:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void FillSessionInfo(const Session& s, v1::SessionInfo* out) {
  const SessionView view = s.View();  // stats and busy of one instant
  const SessionStats& st = view.stats;
  out->set_session_id(s.id());
  out->set_tokens(st.tokens);
  out->set_clustered_tokens(st.clustered_tokens);
  out->set_segments(st.segments);
  v1::MemoryUsage* m = out->mutable_memory();
  m->set_host_bytes(st.memory.host_bytes);
  m->set_host_shared_bytes(st.memory.host_shared_bytes);
  m->set_device_bytes(st.memory.working_set_bytes);  // wire-contract.md
  v1::CacheStats* c = out->mutable_cache();
  c->set_lookups(st.cache.lookups);
  c->set_hits(st.cache.hits);
  c->set_misses(st.cache.misses);
  c->set_h2d_bytes(st.cache.h2d_bytes);
  c->set_hit_rate(st.cache.lookups > 0
                      ? static_cast<double>(st.cache.hits) / st.cache.lookups
                      : 0.0);
  ToProto(s.kv(), out->mutable_kv());
  ToProto(s.sampling(), out->mutable_sampling());
  out->set_busy(view.busy);
  out->set_parent_session_id(s.parent_id());
  out->set_idle_ttl_seconds(s.idle_ttl_seconds());
  out->set_created_unix_ms(s.created_unix_ms());
  out->set_last_used_unix_ms(view.last_used_unix_ms);
}

namespace {

void FillModelInfo(const ServerConfig& config, const ModelConfig& c,
                   v1::ModelInfo* m) {
  m->set_name(c.name);
  m->set_architecture(c.arch);
  m->set_layers(c.n_layers);
  m->set_dim(c.d_model);
  m->set_heads(c.n_heads);
  m->set_kv_heads(c.n_kv_heads);
  m->set_head_dim(c.head_dim);
  m->set_vocab_size(c.vocab_size);
  m->set_context_length(c.context_length);
  m->set_path(config.model_path);
}

void FillLimits(const ServerLimits& l, v1::Limits* out) {
  out->set_max_sessions(l.max_sessions);
  out->set_max_host_kv_bytes(l.max_host_kv_bytes);
  out->set_max_device_kv_bytes(l.max_device_kv_bytes);
  out->set_max_prompt_tokens(l.max_prompt_tokens);
  out->set_max_queued_requests(l.max_queued_requests);
  out->set_session_idle_ttl_seconds(l.session_idle_ttl_seconds);
  out->set_max_session_tokens(l.max_session_tokens);
  out->set_max_chat_messages(l.max_chat_messages);
}

}  // namespace

void FillServerInfo(const ServerConfig& config, const Model& model,
                    const SessionManager& sessions, const EngineStats& engine,
                    const BackendInfo& backend, bool draining,
                    v1::ServerInfo* out) {
  FillModelInfo(config, model.config, out->mutable_model());
  out->set_backend(backend.name);
  out->set_device_name(backend.device);
  out->set_device_memory_bytes(backend.device_memory_bytes);
  out->set_kernels(kernels::cpu::KernelSetName());
  out->set_threads(config.threads);
  const ServerLimits& l = config.limits;
  FillLimits(l, out->mutable_limits());
  const MemoryTotals t = sessions.Totals();
  v1::Capacity* cap = out->mutable_capacity();
  cap->set_free_sessions(std::max(0, l.max_sessions - t.sessions));
  cap->set_free_host_kv_bytes(
      std::max<int64_t>(0, l.max_host_kv_bytes - t.host_bytes));
  cap->set_free_device_kv_bytes(
      std::max<int64_t>(0, l.max_device_kv_bytes - t.device_bytes));
  cap->set_queued_requests(engine.queued);
  ToProto(config.kv, out->mutable_default_kv());
  out->mutable_default_kv()->set_dense_layers(
      std::min(config.kv.dense_layers, model.config.n_layers));
  out->set_version(CLUSTERKV_VERSION);
  out->set_draining(draining);
}

void FillLogprobs(const Tokenizer& tokenizer, const TokenLogprobs& logprobs,
                  v1::TokenEvent* out) {
  out->set_logprob(logprobs.logprob);
  for (const TokenLogprob& t : logprobs.top) {
    v1::TokenLogprob* p = out->add_top_logprobs();
    p->set_id(t.id);
    p->set_logprob(t.logprob);
    p->set_piece(tokenizer.TokenToPiece(t.id, /*render_special=*/true));
  }
}

absl::StatusOr<std::vector<int32_t>> CheckTokenIds(
    absl::Span<const int32_t> ids, int vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokens.ids[", i, "] = ", ids[i],
                       " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

absl::StatusOr<std::vector<int32_t>> EncodeText(const Tokenizer& tokenizer,
                                                absl::string_view text,
                                                bool add_bos) {
  auto ids = tokenizer.Encode(text, /*add_special=*/false,
                              /*parse_special=*/true);
  if (!ids.ok()) return ids.status();
  if (add_bos && tokenizer.add_bos() && tokenizer.bos_id() >= 0) {
    ids->insert(ids->begin(), tokenizer.bos_id());
  }
  return ids;
}

absl::Status TokenizeText(const Tokenizer& tokenizer,
                          const v1::TokenizeRequest& req,
                          v1::TokenizeResponse* out) {
  if (req.text().size() > kMaxTokenizeBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("text is ", req.text().size(), " bytes, more than ",
                     kMaxTokenizeBytes));
  }
  const bool add_special = req.has_add_special() && req.add_special();
  const bool parse_special = !req.has_parse_special() || req.parse_special();
  auto ids = tokenizer.Encode(req.text(), add_special, parse_special);
  if (!ids.ok()) return ids.status();
  out->mutable_ids()->Add(ids->begin(), ids->end());
  if (req.with_pieces()) {
    for (int32_t id : *ids) out->add_pieces(tokenizer.TokenToPiece(id, true));
  }
  return absl::OkStatus();
}

absl::Status DetokenizeIds(const Model& model, const v1::DetokenizeRequest& req,
                           v1::DetokenizeResponse* out) {
  if (req.ids_size() > kMaxDetokenizeIds) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.ids_size(), " ids, more than ", kMaxDetokenizeIds));
  }
  auto ids = CheckTokenIds(req.ids(), model.config.vocab_size);
  if (!ids.ok()) return ids.status();
  StreamingDetokenizer detok(*model.tokenizer, req.render_special());
  std::string text;
  for (int32_t id : *ids) text += detok.Push(id);
  text += detok.Flush();
  out->set_text(std::move(text));
  return absl::OkStatus();
}

}  // namespace ckv::server
