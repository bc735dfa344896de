#include "model/grammar/json_schema_parts.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckv::grammar {
namespace {

std::string Digit(char lo, char hi) {
  if (lo == hi) return absl::StrCat("\"", std::string(1, lo), "\"");
  return absl::StrCat("[", std::string(1, lo), "-", std::string(1, hi), "]");
}

bool All(const std::string& s, char c) {
  return s.find_first_not_of(c) == std::string::npos;
}

// Digit strings of equal length, a <= b: every string in [a, b].
std::string SameLength(const std::string& a, const std::string& b) {
  if (a.empty()) return "\"\"";
  if (a == b) return absl::StrCat("\"", a, "\"");
  const std::string ra = a.substr(1), rb = b.substr(1);
  if (a[0] == b[0]) {
    return absl::StrCat("\"", std::string(1, a[0]), "\" ", SameLength(ra, rb));
  }
  std::vector<std::string> alts;
  char full_lo = a[0], full_hi = b[0];
  if (!All(ra, '0')) {
    alts.push_back(absl::StrCat("\"", std::string(1, a[0]), "\" ",
                                SameLength(ra, std::string(ra.size(), '9'))));
    ++full_lo;
  }
  const bool hi_partial = !All(rb, '9');
  if (hi_partial) --full_hi;
  if (full_lo <= full_hi) {
    std::string x = Digit(full_lo, full_hi);
    if (!ra.empty()) absl::StrAppend(&x, " [0-9]{", ra.size(), "}");
    alts.push_back(x);
  }
  if (hi_partial) {
    alts.push_back(absl::StrCat("\"", std::string(1, b[0]), "\" ",
                                SameLength(std::string(rb.size(), '0'), rb)));
  }
  return absl::StrCat("( ", absl::StrJoin(alts, " | "), " )");
}

// Non-negative integers in [lo, hi].
std::string NonNegative(int64_t lo, int64_t hi) {
  const std::string a = absl::StrCat(lo), b = absl::StrCat(hi);
  std::vector<std::string> alts;
  for (size_t d = a.size(); d <= b.size(); ++d) {
    const std::string from =
        d == a.size() ? a : absl::StrCat("1", std::string(d - 1, '0'));
    const std::string to = d == b.size() ? b : std::string(d, '9');
    alts.push_back(SameLength(from, to));
  }
  return absl::StrCat("( ", absl::StrJoin(alts, " | "), " )");
}

constexpr const char* kFraction = "( \".\" [0-9]{1,16} )?";
constexpr const char* kZeroFraction = "( \".\" \"0\"{1,4} )?";

// |x| in [lo, hi] for numbers (integral lo <= hi): integer part in
// [lo, hi - 1] with any fraction, or exactly hi.
std::string Magnitude(int64_t lo, int64_t hi) {
  std::string exact = absl::StrCat("\"", hi, "\" ", kZeroFraction);
  if (lo > hi - 1) return exact;
  return absl::StrCat("( ", NonNegative(lo, hi - 1), " ", kFraction, " | ",
                      exact, " )");
}

}  // namespace

std::string IntegerRangeGbnf(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (hi >= 0) alts.push_back(NonNegative(std::max<int64_t>(lo, 0), hi));
  if (lo < 0) {
    alts.push_back(absl::StrCat("\"-\" ", NonNegative(hi < 0 ? -hi : 1, -lo)));
  }
  return absl::StrJoin(alts, " | ");
}

std::string NumberRangeGbnf(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (hi >= 0) alts.push_back(Magnitude(std::max<int64_t>(lo, 0), hi));
  if (lo < 0) {
    // -(m) with m in [max(-hi, 0), -lo]; m = 0 only with a fraction.
    alts.push_back(absl::StrCat("\"-\" ", Magnitude(hi < 0 ? -hi : 0, -lo)));
  }
  return absl::StrJoin(alts, " | ");
}

std::string FormatGbnf(const std::string& f) {
  const std::string date =
      "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | "
      "[12] [0-9] | \"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" "
      "[1-9] | [12] [0-9] | \"30\" ) | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | "
      "\"2\" [0-8] ) )";
  const std::string time =
      "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( "
      "\".\" [0-9]{1,6} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" "
      "[0-5] [0-9] )";
  const std::string octet =
      "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] "
      "| [0-9] )";
  const std::string label = "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,61} [a-zA-Z0-9] )?";
  const std::string hex = "[0-9a-f]";
  if (f == "date") return date;
  if (f == "time") return time;
  if (f == "date-time") return absl::StrCat(date, " \"T\" ", time);
  if (f == "uuid") {
    return absl::StrCat(hex, "{8} \"-\" ", hex, "{4} \"-\" ", hex, "{4} \"-\" ",
                        hex, "{4} \"-\" ", hex, "{12}");
  }
  if (f == "ipv4") {
    return absl::StrCat(octet, " \".\" ", octet, " \".\" ", octet, " \".\" ",
                        octet);
  }
  if (f == "hostname") {
    return absl::StrCat("[a-z] ( [a-z0-9-]{0,20} [a-z0-9] )? ( \".\" ", label,
                        " ){0,4}");
  }
  if (f == "email") {
    return absl::StrCat("[a-zA-Z0-9_] [a-zA-Z0-9._+-]{0,30} \"@\" ", label,
                        " ( \".\" ", label, " ){0,3}");
  }
  if (f == "duration") {
    return "\"P\" ( [0-9]{1,4} \"D\" )? \"T\" ( [0-9]{1,4} \"H\" )? ( "
           "[0-9]{1,4} \"M\" )? [0-9]{1,4} \"S\"";
  }
  return "";
}

}  // namespace ckv::grammar
