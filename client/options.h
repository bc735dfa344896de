// Options of the clusterkv command-line client: one typed struct whose
// member initialisers are the defaults (the absl flags take them from here).
#ifndef CLUSTERKV_CLIENT_OPTIONS_H_
#define CLUSTERKV_CLIENT_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/settings_schema.h"

namespace ckv::client {

// Sampling parameters; unset ones take the session's (or server's) defaults.
// One optional member per scalar setting of the schema
// (common/settings_schema.h: CKV_SAMPLING_NUMBERS), each a flag.
struct SamplingOptions {
#define CKV_OPTION(name, type, ...) std::optional<type> name;
  CKV_SAMPLING_NUMBERS(CKV_OPTION)
#undef CKV_OPTION
  std::vector<std::string> stop;                      // --stop S, repeatable
  std::vector<std::pair<int32_t, float>> logit_bias;  // --logit-bias ID=BIAS
};

// The selection policies a server serves, by ascending registry id: the
// client talks only over the wire and cannot include the server's policy
// registry (model/kv/policies/registry.h), so its help texts take the names
// from this one list; client_unit_test checks that it equals the registry's
// policies that are not evaluation-only.
inline constexpr const char* kPolicyNames[] = {"full", "clusterkv", "quest",
                                               "streaming", "clusterkv_rerank"};
// kPolicyNames joined by '|'.
std::string PolicyNamesHelp();

// KV store settings; unset ones take the server's defaults. One member per
// request setting of the schema (common/settings_schema.h), each a flag.
struct KvOptions {
  std::string policy;         // one of kPolicyNames ("" = default)
  std::string gqa_selection;  // settings::kGqaSelectionNames ("" = default)
#define CKV_OPTION(name, type, ...) std::optional<type> name;
  CKV_KV_WIRE_NUMBERS(CKV_OPTION)
#undef CKV_OPTION
};

enum class ProgressMode { kAuto, kBar, kLines, kOff };

struct ClientOptions {
  // Global.
  std::string server = "127.0.0.1:50051";
  bool json = false;
  double timeout_seconds = 0;  // deadline of each RPC; 0 = none
  ProgressMode progress = ProgressMode::kAuto;
  // Transport security and authentication (client/connect.h).
  bool tls = false;             // TLS with the default roots
  std::string tls_ca;           // PEM roots verifying the server (TLS on)
  std::string tls_cert;         // PEM client certificate (mutual TLS)
  std::string tls_key;          // its private key
  std::string tls_server_name;  // expected server certificate name
  std::string token;            // bearer token (visible in `ps`)
  std::string token_file;       // first line: the bearer token
  // Inputs.
  std::string prompt;
  std::string prompt_file;
  std::string doc;                     // qa: the document file
  std::vector<std::string> questions;  // --question Q, repeatable
  std::string file;                    // session prefill --file
  std::string text;                    // session prefill --text
  // How a question is appended to the session; {question} is replaced.
  std::string question_format = "\n\nQuestion: {question}\nAnswer:";
  // qa: send text as is (document + question_format) even when the model
  // has a chat template; otherwise the document is a first turn of role
  // doc_role ("user" or "system") and each question a user turn.
  bool raw = false;
  std::string doc_role = "user";
  std::optional<bool> add_bos;     // unset: server default (true)
  size_t chunk_bytes = 64 * 1024;  // Prefill request size (--chunk-kib)
  // Session settings.
  SamplingOptions sampling;
  KvOptions kv;
  uint32_t idle_ttl_seconds = 0;  // 0 = server default
  // health.
  std::string service;
  // tokenize / detokenize.
  bool add_special = false;
  bool parse_special = true;
  bool render_special = false;
};

struct CommandLine {
  ClientOptions options;
  std::vector<std::string> args;  // positional arguments, without argv[0]
  bool help = false;              // --help / -h / `help`
};

// Parses argv: converts --foo-bar to --foo_bar, collects the repeatable
// --question, --stop and --logit-bias flags, rejects unknown flags and bad
// values with INVALID_ARGUMENT (instead of absl's exit(1)), then runs
// absl::ParseCommandLine and reads the flags into ClientOptions.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv);

// Reads the current flag values (after absl parsing) into ClientOptions.
absl::StatusOr<ClientOptions> ClientOptionsFromFlags();

// "ID=BIAS" of --logit-bias; INVALID_ARGUMENT when malformed.
absl::StatusOr<std::pair<int32_t, float>> ParseLogitBias(
    const std::string& value);

// Replaces {question} in `format` with `question`.
std::string FormatQuestion(const std::string& format,
                           const std::string& question);

// The usage text (--help).
std::string Usage();

}  // namespace ckv::client

#endif  // CLUSTERKV_CLIENT_OPTIONS_H_
