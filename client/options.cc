#include "client/options.h"

#include <string_view>
#include <type_traits>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/flag_spelling.h"

namespace {
const ckv::client::ClientOptions kDefaults;
}  // namespace

ABSL_FLAG(std::string, server, kDefaults.server, "server address host:port");
ABSL_FLAG(bool, json, kDefaults.json, "print one JSON document");
ABSL_FLAG(double, timeout, kDefaults.timeout_seconds,
          "deadline of each RPC in seconds (0 = none)");
ABSL_FLAG(std::string, progress, "auto",
          "prefill progress: auto|bar|lines|off");
ABSL_FLAG(bool, tls, kDefaults.tls, "connect over TLS (default roots)");
ABSL_FLAG(std::string, tls_ca, kDefaults.tls_ca,
          "PEM CA verifying the server (implies --tls)");
ABSL_FLAG(std::string, tls_cert, kDefaults.tls_cert,
          "PEM client certificate for mutual TLS (with --tls-key)");
ABSL_FLAG(std::string, tls_key, kDefaults.tls_key,
          "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_server_name, kDefaults.tls_server_name,
          "name expected in the server certificate (implies --tls)");
ABSL_FLAG(std::string, token, kDefaults.token,
          "bearer token sent on every call (prefer --token-file)");
ABSL_FLAG(std::string, token_file, kDefaults.token_file,
          "file whose first line is the bearer token");
ABSL_FLAG(std::string, prompt, kDefaults.prompt, "generate: prompt text");
ABSL_FLAG(std::string, prompt_file, kDefaults.prompt_file,
          "generate: read the prompt from F");
ABSL_FLAG(std::string, doc, kDefaults.doc, "qa: document file");
ABSL_FLAG(std::string, file, kDefaults.file, "session prefill: text file");
ABSL_FLAG(std::string, text, kDefaults.text, "session prefill: text");
ABSL_FLAG(std::string, question_format, kDefaults.question_format,
          "text appended per question; {question} is replaced");
ABSL_FLAG(bool, raw, kDefaults.raw,
          "qa, generate: send raw text even when the model has a chat "
          "template");
ABSL_FLAG(std::string, doc_role, kDefaults.doc_role,
          "qa with a chat template: role of the document's turn "
          "(user|system)");
ABSL_FLAG(std::optional<bool>, add_bos, kDefaults.add_bos,
          "prepend BOS to an empty session (server default: true)");
ABSL_FLAG(int, chunk_kib, static_cast<int>(kDefaults.chunk_bytes / 1024),
          "Prefill request size in KiB");
// Sampling: one flag per scalar setting of the schema.
#define CKV_SAMPLING_FLAG(name, type, range, help) \
  ABSL_FLAG(std::optional<type>, name, std::nullopt, help);
CKV_SAMPLING_NUMBERS(CKV_SAMPLING_FLAG)
#undef CKV_SAMPLING_FLAG
// tokenize / detokenize.
ABSL_FLAG(bool, add_special, kDefaults.add_special,
          "tokenize: add BOS/EOS as the vocabulary asks");
ABSL_FLAG(bool, parse_special, kDefaults.parse_special,
          "tokenize: text spelling a control token becomes that token");
ABSL_FLAG(bool, render_special, kDefaults.render_special,
          "detokenize: render control tokens as text");
// KV store: one flag per request setting of the schema.
ABSL_FLAG(std::string, policy, kDefaults.kv.policy,
          absl::StrCat("KV policy (server default when empty): ",
                       ckv::client::PolicyNamesHelp()));
ABSL_FLAG(std::string, gqa_selection, kDefaults.kv.gqa_selection,
          absl::StrCat(ckv::settings::KvSettingHelp("gqa_selection"),
                       " (server default when empty)"));
#define CKV_KV_FLAG(name, type, range, fork, help) \
  ABSL_FLAG(std::optional<type>, name, std::nullopt, help);
CKV_KV_WIRE_NUMBERS(CKV_KV_FLAG)
#undef CKV_KV_FLAG
ABSL_FLAG(uint32_t, idle_ttl, kDefaults.idle_ttl_seconds,
          "session create: idle TTL in seconds (0 = server default)");
ABSL_FLAG(std::string, service, kDefaults.service, "health: service name");

namespace ckv::client {

std::string PolicyNamesHelp() { return absl::StrJoin(kPolicyNames, "|"); }

namespace {

constexpr char kUsageCommands[] =
    "usage: clusterkv [--server ADDR] [--json] [--timeout SECONDS]\n"
    "  [--tls] [--tls-ca PEM] [--tls-cert PEM --tls-key PEM]\n"
    "  [--tls-server-name NAME] [--token TOKEN | --token-file F] COMMAND\n"
    "  generate (--prompt TEXT | --prompt-file F) [--raw] [sampling] [kv]\n"
    "      the prompt a user turn when the model has a chat template\n"
    "  qa --doc FILE --question Q [--question Q ...] [sampling] [kv]\n"
    "      [--raw] [--doc-role user|system]: chat template when the model\n"
    "      has one (the document a first turn), else or with --raw text\n"
    "  session create [kv] [sampling] [--idle-ttl S]\n"
    "  session prefill ID (--file F | --text T)\n"
    "  session ask ID --question Q [sampling]\n"
    "  session fork ID | info ID | close ID | cancel ID | list\n"
    "  info\n"
    "  health [--service NAME]       exit 0 when SERVING, 1 otherwise\n"
    "  tokenize (--text T | --file F) [--add-special] [--parse-special=false]\n"
    "  detokenize ID [ID ...] [--render-special]\n"
    "sampling (--logprobs N: per-token log-probabilities and the top N\n"
    "  alternatives, on stderr or in --json):\n";
constexpr char kUsageOther[] =
    "other: --question-format F ({question} is replaced; default\n"
    "  \"\\n\\nQuestion: {question}\\nAnswer:\") --add-bos=true|false\n"
    "  --chunk-kib N (Prefill request size, 64) --progress auto|bar|lines|off\n"
    "errors: 'error: CODE: message' on stderr; exit 2 for INVALID_ARGUMENT,\n"
    "  1 otherwise\n";

// Splits "--name=value" / "-name" into its parts; false if not a flag.
bool SplitFlag(const std::string& arg, std::string* name, std::string* value,
               bool* has_value) {
  if (arg.size() < 2 || arg[0] != '-' || arg == "--") return false;
  const size_t start = arg[1] == '-' ? 2 : 1;
  const size_t eq = arg.find('=');
  *has_value = eq != std::string::npos;
  *name = arg.substr(start, *has_value ? eq - start : std::string::npos);
  *value = *has_value ? arg.substr(eq + 1) : "";
  return true;
}

// Abseil's own flags that are not registered as flags: passed through.
bool IsAbslBuiltin(const std::string& name) {
  static constexpr const char* kBuiltins[] = {
      "helpfull",   "helpshort", "helppackage",    "helpon",
      "helpmatch",  "version",   "flagfile",       "fromenv",
      "tryfromenv", "undefok",   "only_check_args"};
  for (const char* b : kBuiltins) {
    if (name == b) return true;
  }
  return false;
}

bool IsRepeatable(const std::string& name) {
  return name == "question" || name == "stop" || name == "logit_bias";
}

// Removes --question/--stop (any number of times) and --help from args.
absl::Status ExtractSpecial(std::vector<std::string>& args, CommandLine& cl) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name, value;
    bool has_value = false;
    if (i == 0 || !SplitFlag(args[i], &name, &value, &has_value)) {
      rest.push_back(args[i]);
      if (i > 0 && args[i] == "--") {
        rest.insert(rest.end(), args.begin() + i + 1, args.end());
        break;
      }
      continue;
    }
    if (name == "help" || name == "h") {
      cl.help = true;
      continue;
    }
    if (!IsRepeatable(name)) {
      rest.push_back(args[i]);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", DocumentedFlagName(name), " needs a value"));
      }
      value = args[++i];
    }
    if (name == "logit_bias") {
      auto bias = ParseLogitBias(value);
      if (!bias.ok()) return bias.status();
      cl.options.sampling.logit_bias.push_back(*bias);
      continue;
    }
    auto& list =
        name == "question" ? cl.options.questions : cl.options.sampling.stop;
    list.push_back(value);
  }
  args = std::move(rest);
  return absl::OkStatus();
}

// Checks one flag argument (and its separate value, advancing *i) the way
// absl would parse it, but reports problems as a status.
absl::Status CheckFlag(const std::vector<std::string>& args, size_t* i) {
  std::string name, value;
  bool has_value = false;
  if (!SplitFlag(args[*i], &name, &value, &has_value) || IsAbslBuiltin(name)) {
    return absl::OkStatus();
  }
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr && !has_value && name.rfind("no", 0) == 0) {
    absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
    if (negated != nullptr && negated->IsOfType<bool>())
      return absl::OkStatus();
  }
  if (flag == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown flag ", DocumentedFlagName(name)));
  }
  if (flag->IsOfType<bool>() && !has_value) return absl::OkStatus();
  if (!has_value) {
    if (*i + 1 >= args.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag ", DocumentedFlagName(name), " needs a value"));
    }
    value = args[++*i];
  }
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad value '", value, "' for ", DocumentedFlagName(name), ": ", error));
  }
  return absl::OkStatus();
}

absl::Status CheckFlags(const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--") break;
    if (auto s = CheckFlag(args, &i); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<ProgressMode> ParseProgressMode(const std::string& s) {
  if (s == "auto") return ProgressMode::kAuto;
  if (s == "bar") return ProgressMode::kBar;
  if (s == "lines") return ProgressMode::kLines;
  if (s == "off") return ProgressMode::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("--progress must be auto|bar|lines|off, not '", s, "'"));
}

void ReadSamplingFlags(SamplingOptions& s) {
#define CKV_READ(name, ...) s.name = absl::GetFlag(FLAGS_##name);
  CKV_SAMPLING_NUMBERS(CKV_READ)
#undef CKV_READ
}

absl::Status ReadSecurityFlags(ClientOptions& o) {
  o.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  o.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  o.tls = absl::GetFlag(FLAGS_tls) || !o.tls_ca.empty() ||
          !o.tls_cert.empty() || !o.tls_server_name.empty();
  o.token = absl::GetFlag(FLAGS_token);
  o.token_file = absl::GetFlag(FLAGS_token_file);
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key must be given together");
  }
  if (!o.token.empty() && !o.token_file.empty()) {
    return absl::InvalidArgumentError("give --token or --token-file, not both");
  }
  return absl::OkStatus();
}

void ReadKvFlags(KvOptions& kv) {
  kv.policy = absl::GetFlag(FLAGS_policy);
  kv.gqa_selection = absl::GetFlag(FLAGS_gqa_selection);
#define CKV_READ(name, ...) kv.name = absl::GetFlag(FLAGS_##name);
  CKV_KV_WIRE_NUMBERS(CKV_READ)
#undef CKV_READ
}

// The sampling flags of the schema, a line break after every four.
std::string SamplingFlagsUsage() {
  std::string out = "  ";
  int n = 0;
  auto add = [&](const std::string& flag) {
    if (n > 0) out += (n % 4 == 0) ? "\n  " : " ";
    ++n;
    out += flag;
  };
#define CKV_USAGE(name, type, ...) \
  add(DocumentedFlagName(#name) +  \
      (std::is_same_v<type, bool> ? "=true|false" : std::string(" N")));
  CKV_SAMPLING_NUMBERS(CKV_USAGE)
#undef CKV_USAGE
  add("--stop S (repeatable)");
  add("--logit-bias ID=BIAS (repeatable)");
  return out + "\n";
}

}  // namespace

std::string Usage() {
  return absl::StrCat(kUsageCommands, SamplingFlagsUsage(), "kv: --policy ",
                      PolicyNamesHelp(), "\n  ",
                      settings::KvRequestFlagsUsage(), "\n", kUsageOther);
}

absl::StatusOr<ClientOptions> ClientOptionsFromFlags() {
  ClientOptions o;
  o.server = absl::GetFlag(FLAGS_server);
  o.json = absl::GetFlag(FLAGS_json);
  o.timeout_seconds = absl::GetFlag(FLAGS_timeout);
  if (o.timeout_seconds < 0) {
    return absl::InvalidArgumentError("--timeout must be >= 0");
  }
  auto progress = ParseProgressMode(absl::GetFlag(FLAGS_progress));
  if (!progress.ok()) return progress.status();
  o.progress = *progress;
  if (auto s = ReadSecurityFlags(o); !s.ok()) return s;
  o.prompt = absl::GetFlag(FLAGS_prompt);
  o.prompt_file = absl::GetFlag(FLAGS_prompt_file);
  o.doc = absl::GetFlag(FLAGS_doc);
  o.file = absl::GetFlag(FLAGS_file);
  o.text = absl::GetFlag(FLAGS_text);
  o.question_format = absl::GetFlag(FLAGS_question_format);
  o.raw = absl::GetFlag(FLAGS_raw);
  o.doc_role = absl::GetFlag(FLAGS_doc_role);
  if (o.doc_role != "user" && o.doc_role != "system") {
    return absl::InvalidArgumentError("--doc-role must be user or system");
  }
  o.add_bos = absl::GetFlag(FLAGS_add_bos);
  const int kib = absl::GetFlag(FLAGS_chunk_kib);
  if (kib < 1 || kib > 3072) {
    return absl::InvalidArgumentError("--chunk-kib must be in [1, 3072]");
  }
  o.chunk_bytes = static_cast<size_t>(kib) * 1024;
  ReadSamplingFlags(o.sampling);
  ReadKvFlags(o.kv);
  o.idle_ttl_seconds = absl::GetFlag(FLAGS_idle_ttl);
  o.service = absl::GetFlag(FLAGS_service);
  o.add_special = absl::GetFlag(FLAGS_add_special);
  o.parse_special = absl::GetFlag(FLAGS_parse_special);
  o.render_special = absl::GetFlag(FLAGS_render_special);
  return o;
}

absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    FlagNameToAbslSpelling(args[i]);
  }
  CommandLine cl;
  if (auto s = ExtractSpecial(args, cl); !s.ok()) return s;
  if (auto s = CheckFlags(args); !s.ok()) return s;
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  const std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(ptrs.size()), ptrs.data());
  std::vector<std::string> questions = std::move(cl.options.questions);
  std::vector<std::string> stops = std::move(cl.options.sampling.stop);
  auto biases = std::move(cl.options.sampling.logit_bias);
  auto options = ClientOptionsFromFlags();
  if (!options.ok()) return options.status();
  cl.options = *std::move(options);
  cl.options.questions = std::move(questions);
  cl.options.sampling.stop = std::move(stops);
  cl.options.sampling.logit_bias = std::move(biases);
  cl.args.assign(positional.begin() + 1, positional.end());
  return cl;
}

absl::StatusOr<std::pair<int32_t, float>> ParseLogitBias(
    const std::string& value) {
  const size_t eq = value.find('=');
  int32_t id = 0;
  float bias = 0;
  if (eq == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(value).substr(0, eq), &id) ||
      !absl::SimpleAtof(absl::string_view(value).substr(eq + 1), &bias)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--logit-bias takes ID=BIAS (e.g. 42=-5.5), not '", value, "'"));
  }
  return std::make_pair(id, bias);
}

std::string FormatQuestion(const std::string& format,
                           const std::string& question) {
  return absl::StrReplaceAll(format, {{"{question}", question}});
}

}  // namespace ckv::client
