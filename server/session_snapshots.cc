#include "server/session_snapshots.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckv::server {
namespace {

namespace fs = std::filesystem;

// Session ids as SessionManager makes them ("[key.]s-<hex>"): safe as a
// file name.
bool ValidId(absl::string_view id) {
  return !id.empty() && id.size() <= 200 && id[0] != '.' &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                  c == '-' || c == '_' || c == '.';
         });
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SessionSnapshots>> SessionSnapshots::Open(
    const std::string& dir, const Model& model, int64_t max_session_tokens,
    Logger info, Logger error) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--snapshot-dir '", dir, "' is not a usable folder: ", ec.message()));
  }
  auto e = SnapshotExpectFor(model, max_session_tokens);
  if (!e.ok()) return e.status();
  std::unique_ptr<SessionSnapshots> s(
      new SessionSnapshots(dir, *e, std::move(info), std::move(error)));
  s->Scan();
  return s;
}

void SessionSnapshots::Scan() {
  std::error_code ec;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::EndsWith(name, absl::StrCat(kSnapshotSuffix, ".tmp"))) {
      fs::remove(entry.path(), ec);  // an interrupted write
      continue;
    }
    if (!entry.is_regular_file(ec) || !absl::EndsWith(name, kSnapshotSuffix)) {
      continue;
    }
    const std::string id =
        name.substr(0, name.size() - std::strlen(kSnapshotSuffix));
    if (ValidId(id)) files_[id] = entry.path().string();
  }
  if (ec)
    error_(absl::StrCat("snapshots: cannot list ", dir_, ": ", ec.message()));
}

int SessionSnapshots::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(files_.size());
}

bool SessionSnapshots::Has(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.contains(id);
}

std::string SessionSnapshots::PathOf(const std::string& id) const {
  return (fs::path(dir_) / absl::StrCat(id, kSnapshotSuffix)).string();
}

namespace {

SnapshotConversation ToSnapshot(const Conversation& c) {
  SnapshotConversation out;
  out.active = c.active;
  if (!c.active) return out;
  for (const chat::ChatMessage& m : c.messages) {
    out.messages.emplace_back(m.role, m.content);
  }
  out.text = c.text;
  out.reply_open = c.reply_open;
  return out;
}

Conversation FromSnapshot(SnapshotConversation c) {
  Conversation out;
  out.active = c.active;
  for (auto& [role, content] : c.messages) {
    out.messages.push_back({std::move(role), std::move(content)});
  }
  out.text = std::move(c.text);
  out.reply_open = c.reply_open;
  return out;
}

}  // namespace

absl::StatusOr<SnapshotResult> SessionSnapshots::Save(Session& session) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string& id = session.id();
  if (!ValidId(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("session id '", id, "' cannot name a snapshot file"));
  }
  auto parts = session.store().Export();
  if (!parts.ok()) return parts.status();
  Snapshot snap;
  snap.meta.session_id = id;
  snap.meta.parent_id = session.parent_id();
  snap.meta.tenant = session.tenant();
  snap.meta.idle_ttl_seconds = session.idle_ttl_seconds();
  snap.meta.sampling = session.sampling();
  snap.meta.last_logits = session.last_logits();
  snap.meta.conversation = ToSnapshot(session.conversation());
  snap.store = *std::move(parts);
  SnapshotResult r;
  r.path = PathOf(id);
  auto bytes = WriteSnapshotFile(r.path, snap, expect_.model_fingerprint);
  if (!bytes.ok()) return bytes.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    files_[id] = r.path;
  }
  r.bytes = *bytes;
  r.seconds = SecondsSince(t0);
  return r;
}

bool SessionSnapshots::SaveAndLog(Session& session, const char* why) {
  auto r = Save(session);
  if (!r.ok()) {
    error_(absl::StrCat("snapshot of session ", session.id(), " (", why,
                        ") failed: ", r.status().message()));
    return false;
  }
  info_(
      absl::StrFormat("snapshot of session %s (%s): %d tokens, %d bytes in "
                      "%.3f s -> %s",
                      session.id(), why, session.store().num_tokens(), r->bytes,
                      r->seconds, r->path));
  return true;
}

absl::Status SessionSnapshots::Unusable(const std::string& id,
                                        absl::string_view why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(id);
  }
  const std::string message =
      absl::StrCat("cannot restore session '", id, "' from ", why);
  error_(absl::StrCat(message, " (skipped)"));
  return absl::FailedPreconditionError(message);
}

absl::StatusOr<std::shared_ptr<Session>> SessionSnapshots::Restore(
    const std::string& id, ClusterWorker* worker, StoreEnv env) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(id);
    if (it == files_.end()) {
      return absl::NotFoundError(absl::StrCat("unknown session '", id, "'"));
    }
    path = it->second;
  }
  SnapshotExpect expect = expect_;
  expect.arena = env.arena;
  auto snap = ReadSnapshotFile(path, expect);
  if (!snap.ok()) return Unusable(id, snap.status().message());
  SnapshotMeta& m = snap->meta;
  if (m.session_id != id) {
    return Unusable(id, absl::StrCat(path, ": the file holds session '",
                                     m.session_id, "'"));
  }
  const KvStoreConfig kv = snap->store.config;
  auto store =
      ClusteredKvStore::Restore(std::move(snap->store), worker, std::move(env));
  if (!store.ok()) {
    return Unusable(id, absl::StrCat(path, ": ", store.status().message()));
  }
  auto session = std::make_shared<Session>(id, m.parent_id, kv, m.sampling,
                                           m.idle_ttl_seconds,
                                           *std::move(store), m.tenant);
  session->set_last_logits(std::move(m.last_logits));
  session->conversation() = FromSnapshot(std::move(m.conversation));
  info_(absl::StrFormat("restored session %s from %s: %d tokens in %.3f s", id,
                        path, session->store().num_tokens(), SecondsSince(t0)));
  return session;
}

void SessionSnapshots::Remove(const std::string& id) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(id);
    if (it == files_.end()) return;
    path = it->second;
    files_.erase(it);
  }
  std::error_code ec;
  fs::remove(path, ec);
  if (ec)
    error_(absl::StrCat("cannot delete snapshot ", path, ": ", ec.message()));
}

}  // namespace ckv::server
