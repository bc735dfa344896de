#include "bench/engine_prefill_cache.h"

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/kv/snapshot.h"

namespace ckv::bench {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<uint64_t> Fingerprint(const Model& model) {
  return ModelFingerprint(model.file->path(), model.file->tensors());
}

std::string StatsPath(const std::string& snapshot_path) {
  return snapshot_path + ".json";
}

}  // namespace

absl::StatusOr<std::string> SavedPrefillPath(const std::string& dir,
                                             const Model& model,
                                             const KvStoreConfig& config,
                                             int64_t context, uint64_t seed,
                                             int prefill_chunk) {
  auto fp = Fingerprint(model);
  if (!fp.ok()) return fp.status();
  const uint64_t store_fp = StoreFingerprint(KvShapeOf(model.config), config);
  return absl::StrFormat("%s/prefill-%016x-%016x-ctx%d-seed%d-chunk%d.ckvsnap",
                         dir, *fp, store_fp, context, seed, prefill_chunk);
}

absl::StatusOr<SavedPrefill> LoadPrefill(const std::string& path,
                                         const Model& model, int64_t max_tokens,
                                         ClusterWorker* worker) {
  std::error_code ec;
  if (!fs::exists(path, ec) || !fs::exists(StatsPath(path), ec)) {
    return absl::NotFoundError(absl::StrCat("no saved prefill at ", path));
  }
  auto fp = Fingerprint(model);
  if (!fp.ok()) return fp.status();
  SnapshotExpect e;
  e.model_fingerprint = *fp;
  e.shape = KvShapeOf(model.config);
  e.vocab_size = model.config.vocab_size;
  e.max_tokens = max_tokens;
  auto snap = ReadSnapshotFile(path, e);
  if (!snap.ok()) return snap.status();
  auto store = ClusteredKvStore::Restore(std::move(snap->store), worker);
  if (!store.ok()) return store.status();
  std::ifstream in(StatsPath(path));
  SavedPrefill out{*std::move(store), Json::parse(in, nullptr, false)};
  if (out.stats.is_discarded() || !out.stats.is_object()) {
    return absl::DataLossError(
        absl::StrCat(StatsPath(path), " is not a JSON object"));
  }
  return out;
}

absl::Status SavePrefill(const std::string& path, const Model& model,
                         const ClusteredKvStore& store, const Json& stats) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  auto fp = Fingerprint(model);
  if (!fp.ok()) return fp.status();
  auto parts = store.Export();
  if (!parts.ok()) return parts.status();
  Snapshot snap;
  snap.meta.session_id = "engine-prefill";  // snapshots name a session
  snap.store = *std::move(parts);
  // The stats file appears last (renamed into place after the snapshot is
  // complete): LoadPrefill needs both.
  const std::string tmp = StatsPath(path) + ".tmp";
  {
    std::ofstream out(tmp);
    out << stats.dump(1) << "\n";
    if (!out.good()) {
      return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    }
  }
  auto written = WriteSnapshotFile(path, snap, *fp);
  if (!written.ok()) return written.status();
  fs::rename(tmp, StatsPath(path), ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", tmp, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace ckv::bench
