// The two spellings of a command-line flag name: documented with dashes
// (--max-tokens), registered with absl with underscores (--max_tokens). The
// one converter between them for every program (clusterkv, clusterkv-server,
// clusterkv-model, the benchmarks and tools).
//
// common/ is header-only and depends on the C++ standard library alone, so
// every layer may include it, the wire-only client included (which links no
// project library but ckv_proto).
#pragma once

#include <string>
#include <string_view>

namespace ckv {

// Rewrites the name part of one flag argument, "--foo-bar=x-y" ->
// "--foo_bar=x-y" (also "-foo-bar"); the value after '=' is kept. An argument
// whose name does not start with a letter ("--", "-", "-1e-5", "text") is
// left alone. A separate value that looks like a flag ("--prompt -a-b") is
// rewritten too: write such values as --prompt=-a-b.
inline void FlagNameToAbslSpelling(char* arg) {
  if (arg[0] != '-') return;
  char* name = arg[1] == '-' ? arg + 2 : arg + 1;
  const char first = *name;
  if (!((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z'))) {
    return;
  }
  for (char* p = name; *p != '\0' && *p != '='; ++p) {
    if (*p == '-') *p = '_';
  }
}

inline void FlagNameToAbslSpelling(std::string& arg) {
  FlagNameToAbslSpelling(arg.data());
}

// FlagNameToAbslSpelling on argv[1..] before absl::ParseCommandLine, up to a
// bare "--" (absl passes what follows it on as positional arguments).
inline void DashesToUnderscores(int argc, char** argv) {
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i) {
    FlagNameToAbslSpelling(argv[i]);
  }
}

// The documented spelling of an absl flag name: "max_tokens" ->
// "--max-tokens" (for messages).
inline std::string DocumentedFlagName(std::string_view absl_name) {
  std::string out = "--";
  for (const char c : absl_name) out.push_back(c == '_' ? '-' : c);
  return out;
}

}  // namespace ckv
