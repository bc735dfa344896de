#include "bench/engine_prefill_cache.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckv::bench {
namespace {

namespace fs = std::filesystem;

std::string StatsPath(const std::string& snapshot_path) {
  return snapshot_path + ".json";
}

}  // namespace

absl::StatusOr<PrefillCache> PrefillCache::Open(const std::string& dir,
                                                const Model& model) {
  auto expect = SnapshotExpectFor(model, /*max_tokens=*/1);
  if (!expect.ok()) return expect.status();
  return PrefillCache(dir, *std::move(expect));
}

std::string PrefillCache::PathOf(const KvStoreConfig& config, int64_t context,
                                 uint64_t seed, int prefill_chunk) const {
  return absl::StrFormat("%s/prefill-%016x-%016x-ctx%d-seed%d-chunk%d.ckvsnap",
                         dir_, expect_.model_fingerprint,
                         StoreFingerprint(expect_.shape, config), context, seed,
                         prefill_chunk);
}

absl::StatusOr<SavedPrefill> PrefillCache::Load(const std::string& path,
                                                int64_t max_tokens,
                                                ClusterWorker* worker) const {
  std::error_code ec;
  if (!fs::exists(path, ec) || !fs::exists(StatsPath(path), ec)) {
    return absl::NotFoundError(absl::StrCat("no saved prefill at ", path));
  }
  SnapshotExpect e = expect_;
  e.max_tokens = max_tokens;
  auto snap = ReadSnapshotFile(path, e);
  if (!snap.ok()) return snap.status();
  auto store = ClusteredKvStore::Restore(std::move(snap->store), worker);
  if (!store.ok()) return store.status();
  std::ifstream in(StatsPath(path));
  SavedPrefill out{*std::move(store),
                   nlohmann::json::parse(in, nullptr, false)};
  if (out.stats.is_discarded() || !out.stats.is_object()) {
    return absl::DataLossError(
        absl::StrCat(StatsPath(path), " is not a JSON object"));
  }
  return out;
}

absl::Status PrefillCache::Save(const std::string& path,
                                const ClusteredKvStore& store,
                                const nlohmann::json& stats) const {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  auto parts = store.Export();
  if (!parts.ok()) return parts.status();
  Snapshot snap;
  snap.meta.session_id = "engine-prefill";  // snapshots name a session
  snap.store = *std::move(parts);
  // The stats file appears last (renamed into place after the snapshot is
  // complete): Load needs both.
  const std::string tmp = StatsPath(path) + ".tmp";
  {
    std::ofstream out(tmp);
    out << stats.dump(1) << "\n";
    if (!out.good()) {
      return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    }
  }
  auto written = WriteSnapshotFile(path, snap, expect_.model_fingerprint);
  if (!written.ok()) return written.status();
  fs::rename(tmp, StatsPath(path), ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace ckv::bench
