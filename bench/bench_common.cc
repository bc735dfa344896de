#include "bench/bench_common.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <system_error>

#include "kernels/cpu/quant.h"
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

std::vector<uint8_t> RandomWeightMatrix(kernels::DType t, int64_t n_out,
                                        int64_t n_in) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t row_bytes = kernels::RowBytes(t, n_in);
  std::vector<uint8_t> w(row_bytes * n_out);
  std::vector<float> row(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    for (float& v : row) v = dist(rng);
    kernels::cpu::QuantizeRow(t, row.data(), n_in, w.data() + o * row_bytes);
  }
  return w;
}

std::vector<std::vector<double>> TimeInterleaved(
    int reps, const std::vector<std::function<void()>>& fns) {
  for (const auto& fn : fns) fn();  // warm-up
  std::vector<std::vector<double>> seconds(fns.size());
  for (int i = 0; i < reps; ++i) {
    for (size_t f = 0; f < fns.size(); ++f) {
      const auto t0 = std::chrono::steady_clock::now();
      fns[f]();
      const auto t1 = std::chrono::steady_clock::now();
      seconds[f].push_back(std::chrono::duration<double>(t1 - t0).count());
    }
  }
  return seconds;
}

}  // namespace ckv::bench
