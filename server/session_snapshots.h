// Durable sessions (--snapshot-dir): one snapshot file per session,
// "<id>.ckvsnap" in one folder, written atomically (model/kv/snapshot.h)
// on drain, on idle expiry and on request (SnapshotSession). At start the
// folder is scanned and the ids registered without loading anything; a
// session is read back when a call first names it (SessionManager::Get). A
// loaded snapshot stays on disk until the session is closed (deleted) or
// snapshotted again (replaced).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/kv/cluster_worker.h"
#include "model/kv/snapshot.h"
#include "model/model.h"
#include "server/session.h"

namespace ckv::server {

inline constexpr char kSnapshotSuffix[] = ".ckvsnap";

struct SnapshotResult {
  std::string path;
  int64_t bytes = 0;
  double seconds = 0.0;
};

class SessionSnapshots {
 public:
  using Logger = std::function<void(const std::string&)>;

  // Creates `dir` if needed, fingerprints the model file, registers every
  // "<id>.ckvsnap" and deletes leftover "*.tmp" files of interrupted writes.
  // Errors name the folder. Restored stores hold at most max_session_tokens.
  static absl::StatusOr<std::unique_ptr<SessionSnapshots>> Open(
      const std::string& dir, const Model& model, int64_t max_session_tokens,
      Logger info, Logger error);

  const std::string& dir() const { return dir_; }
  int size() const;  // registered ids
  bool Has(const std::string& id) const;

  // Writes the session (the caller holds its lease; waits for its indexes)
  // and registers it.
  absl::StatusOr<SnapshotResult> Save(Session& session);
  // Save, logging the outcome ("why": drain, idle, ...); true when written.
  bool SaveAndLog(Session& session, const char* why);
  // The session of `id`'s snapshot, not yet known to any SessionManager.
  // NOT_FOUND when none is registered. FAILED_PRECONDITION naming the file
  // when it is unusable (corrupt, truncated, of another model or store
  // layout, or of another id): logged, and the id is forgotten (the file
  // stays for inspection) so that later calls get NOT_FOUND. The store
  // gets `env` (its segment rows are read into env.arena).
  absl::StatusOr<std::shared_ptr<Session>> Restore(const std::string& id,
                                                   ClusterWorker* worker,
                                                   StoreEnv env = {});
  // Deletes `id`'s snapshot, if any (CloseSession).
  void Remove(const std::string& id);

 private:
  SessionSnapshots(std::string dir, const SnapshotExpect& expect, Logger info,
                   Logger error)
      : dir_(std::move(dir)),
        expect_(expect),
        info_(std::move(info)),
        error_(std::move(error)) {}
  void Scan();
  std::string PathOf(const std::string& id) const;
  // Forgets `id` and logs; FAILED_PRECONDITION "... from <why>", where
  // `why` starts with the file's path.
  absl::Status Unusable(const std::string& id, absl::string_view why);

  const std::string dir_;
  const SnapshotExpect expect_;
  const Logger info_, error_;
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::string> files_;  // id -> path; mu_
};

}  // namespace ckv::server
