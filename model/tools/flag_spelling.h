// Lets command-line tools accept --foo-bar for the absl flag --foo_bar (the
// documented spelling) by rewriting dashes in flag names before
// absl::ParseCommandLine. Values (after '=') are left alone.
#pragma once

namespace ckv {

inline void DashesToUnderscores(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (a[0] != '-' || a[1] != '-') continue;
    for (char* p = a + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

}  // namespace ckv
