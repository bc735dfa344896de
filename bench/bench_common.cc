#include "bench/bench_common.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "kernels/dtype.h"

#ifndef CLUSTERKV_SOURCE_DIR
#define CLUSTERKV_SOURCE_DIR "."
#endif

namespace ckv::bench {

namespace fs = std::filesystem;

RandomModelSpec DefaultModelSpec() {
  RandomModelSpec s;
  s.layers = 4;
  s.dim = 512;
  s.heads = 8;
  s.kv_heads = 2;
  s.ffn = 1536;
  s.dtype = kernels::DType::kF16;
  s.vocab = CLUSTERKV_SOURCE_DIR
      "/tests/fixtures/tokenizer/ggml-vocab-llama-bpe.gguf";
  return s;
}

RandomModelSpec QuickModelSpec() {
  RandomModelSpec s;
  s.layers = 2;
  s.dim = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 128;
  s.dtype = kernels::DType::kF16;
  s.vocab = "byte";
  return s;
}


std::string RandomModelName(const RandomModelSpec& s) {
  const std::string vocab =
      s.vocab == "byte" ? "byte" : fs::path(s.vocab).stem().string();
  return absl::StrCat("random-", s.layers, "x", s.dim, "-h", s.heads, "kv",
                      s.kv_heads, "-ffn", s.ffn, "-",
                      kernels::DTypeName(s.dtype), s.k_m_mix ? "_M" : "", "-",
                      vocab, "-s", s.seed, ".gguf");
}

absl::StatusOr<std::string> EnsureRandomModel(const RandomModelSpec& spec,
                                              const std::string& work_dir,
                                              const char* program) {
  if (spec.vocab != "byte" && !fs::exists(spec.vocab)) {
    return absl::NotFoundError(absl::StrCat(
        "vocabulary '", spec.vocab,
        "' not found: pass --vocab (a GGUF or 'byte') or --model"));
  }
  std::error_code ec;
  fs::create_directories(work_dir, ec);
  const std::string path =
      (fs::path(work_dir) / RandomModelName(spec)).string();
  if (fs::exists(path)) return path;
  std::fprintf(stderr, "%s: writing random model %s\n", program, path.c_str());
  const std::string tmp = path + ".tmp";
  if (auto s = WriteRandomModel(spec, tmp); !s.ok()) return s;
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename: ", ec.message()));
  return path;
}

std::string UtcTimestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) {
    return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace ckv::bench
