// Shared pieces of the clusterkv subcommands.
#ifndef CLUSTERKV_CLIENT_COMMAND_UTIL_H_
#define CLUSTERKV_CLIENT_COMMAND_UTIL_H_

#include <functional>
#include <istream>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/options.h"
#include "client/progress.h"
#include "client/rpc_client.h"
#include "nlohmann/json.hpp"

namespace ckv::client {

// Where a command writes: results to `out`, progress and timings to `err`.
struct Io {
  std::ostream& out;
  std::ostream& err;
  bool err_is_tty = false;
};

pb::SamplingParams BuildSampling(const SamplingOptions& s);
pb::KvConfig BuildKv(const KvOptions& kv);
pb::CreateSessionRequest BuildCreateSession(const ClientOptions& o);

// The whole file; NOT_FOUND when it cannot be opened.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Opens a file for chunked reading; NOT_FOUND when it cannot be opened.
absl::StatusOr<std::unique_ptr<std::istream>> OpenFile(const std::string& path);

ProgressStyle ProgressStyleFor(const ClientOptions& o, const Io& io);

// Prefills `session_id` from `in` with progress on io.err.
absl::StatusOr<pb::PrefillSummary> PrefillWithProgress(
    RpcClient& client, const std::string& session_id, std::istream& in,
    const ClientOptions& o, const Io& io);

// "eos", "length", "stop", "unspecified".
std::string FinishReasonName(pb::FinishReason reason);
// "42 tokens | TTFT 0.123 s | 35.2 tok/s | total 1.30 s | finish eos"
std::string DecodeSummaryLine(const pb::DecodeSummary& s);
// "prefill: 1000 tokens in 0.52 s (1923 tok/s), 13 clusters, ..."
std::string PrefillSummaryLine(const pb::PrefillSummary& s);

// "1.50 GiB", "512 B".
std::string FormatBytes(int64_t bytes);
// "policy=clusterkv budget=1024 ..." from a message's fields.
std::string KeyValues(const google::protobuf::Message& m);

// "logprob  -0.1234      42 \"piece\"  top: 42 \"piece\" -0.1234 ..."
// (text and pieces C-escaped).
std::string LogprobLine(const pb::TokenEvent& t);

// Runs a Decode/Generate call and prints its streamed text: human mode
// streams pieces to io.out and the timings line ("<name>: ...") to io.err,
// then one LogprobLine per token when the events carry logprobs; JSON mode
// prints one document: `json_fields` + text + summary (+ "tokens": the
// token events with their logprobs).
using DecodeCall =
    std::function<absl::StatusOr<pb::DecodeSummary>(const TokenCallback&)>;
absl::StatusOr<int> StreamDecodeOutput(const DecodeCall& call,
                                       const std::string& name,
                                       nlohmann::json json_fields,
                                       const ClientOptions& o, const Io& io);

// Prints a JSON document (one line) to io.out.
void PrintJson(const Io& io, const nlohmann::json& j);

}  // namespace ckv::client

#endif  // CLUSTERKV_CLIENT_COMMAND_UTIL_H_
