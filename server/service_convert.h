// Conversions between the wire messages and the engine's typed structs, and
// validation of request input. Errors are INVALID_ARGUMENT naming the field.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "clusterkv/v1/clusterkv.pb.h"
#include "model/generation.h"
#include "model/kv/kv_config.h"
#include "model/model.h"
#include "model/sampler.h"
#include "server/engine_loop.h"
#include "server/server_config.h"
#include "server/session.h"
#include "server/session_manager.h"

namespace ckv::server {

namespace v1 = ::clusterkv::v1;

// The ranges of the KV and sampling settings are checked where the schema
// (common/settings_schema.h) binds them to the structs:
// ValidateKvStoreConfig and ValidateSamplingParams, INVALID_ARGUMENT naming
// the field as on the wire ("kv.budget"), its range and the value.
// ValidateSampling adds the request's bounds on stop strings. With
// vocab_size > 0, logit_bias ids are checked against it.
absl::Status ValidateSampling(const SamplingParams& s, int vocab_size = 0);

// INVALID_ARGUMENT when `m` holds a field of a known number with the wrong
// wire type (it would otherwise be dropped silently and the default used);
// fields of unknown numbers (newer clients) are ignored.
absl::Status RejectMistypedFields(const google::protobuf::Message& m,
                                  absl::string_view prefix);

// `base` with the fields set in `p` replaced; validated. A set but empty or
// unknown policy / gqa_selection is INVALID_ARGUMENT listing the accepted
// values. A base dense_layers beyond `model_layers` counts as all layers; a
// requested one beyond is INVALID_ARGUMENT.
absl::StatusOr<KvStoreConfig> MergeKvConfig(const KvStoreConfig& base,
                                            const v1::KvConfig& p,
                                            int model_layers);
// With vocab_size > 0, logit_bias ids are checked against it. A set
// `constraint` is compiled and bound to `tokenizer`'s vocabulary
// (INVALID_ARGUMENT "sampling.constraint: <reason>" when it does not
// compile); without a tokenizer (a session's defaults) it is
// INVALID_ARGUMENT: a constraint applies to one generation request.
absl::StatusOr<SamplingParams> MergeSampling(
    const SamplingParams& base, const v1::SamplingParams& p, int vocab_size = 0,
    const Tokenizer* tokenizer = nullptr);
// The wire constraint as a spec; INVALID_ARGUMENT when no kind is set.
absl::StatusOr<grammar::ConstraintSpec> ConstraintFromProto(
    const v1::Constraint& c);

void ToProto(const KvStoreConfig& kv, v1::KvConfig* out);
void ToProto(const SamplingParams& s, v1::SamplingParams* out);
v1::FinishReason ToProto(FinishReason r);
void FillSessionInfo(const Session& s, v1::SessionInfo* out);
void FillServerInfo(const ServerConfig& config, const Model& model,
                    const SessionManager& sessions, const EngineStats& engine,
                    const BackendInfo& backend, bool draining,
                    v1::ServerInfo* out);

// Sets the event's logprob and top_logprobs (with each token's bytes).
void FillLogprobs(const Tokenizer& tokenizer, const TokenLogprobs& logprobs,
                  v1::TokenEvent* out);

// Ids checked against the vocabulary (INVALID_ARGUMENT naming the first id
// outside [0, vocab_size)).
absl::StatusOr<std::vector<int32_t>> CheckTokenIds(
    absl::Span<const int32_t> ids, int vocab_size);
// Tokenize: text at most kMaxTokenizeBytes, valid UTF-8 (else
// INVALID_ARGUMENT). Detokenize: at most kMaxDetokenizeIds ids, each in the
// vocabulary (else INVALID_ARGUMENT).
inline constexpr size_t kMaxTokenizeBytes = size_t{4} << 20;
inline constexpr int kMaxDetokenizeIds = 1 << 20;
absl::Status TokenizeText(const Tokenizer& tokenizer,
                          const v1::TokenizeRequest& req,
                          v1::TokenizeResponse* out);
absl::Status DetokenizeIds(const Model& model, const v1::DetokenizeRequest& req,
                           v1::DetokenizeResponse* out);

// Tokenizes `text` (special tokens parsed, no EOS), prepending BOS when
// `add_bos` and the vocabulary asks for one (Tokenizer::add_bos()).
// INVALID_ARGUMENT for invalid UTF-8.
absl::StatusOr<std::vector<int32_t>> EncodeText(const Tokenizer& tokenizer,
                                                absl::string_view text,
                                                bool add_bos);

}  // namespace ckv::server
