// A session: one sequence's clustered KV store plus its defaults. The store
// is touched only by the engine thread while the session is leased (busy);
// other threads read the stats snapshot the engine publishes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "model/chat/chat_template.h"
#include "model/kv/clustered_store.h"
#include "model/sampler.h"

namespace ckv::server {

// What other threads may read about a session at any time.
struct SessionStats {
  int64_t tokens = 0;
  int64_t clustered_tokens = 0;
  int segments = 0;
  int clusters = 0;  // k-means clusters over all segments (first sparse layer)
  KvMemoryStats memory;
  CacheStats cache;
  // (uid, host bytes) of segments shared with other sessions, so totals can
  // count each shared segment once.
  std::vector<std::pair<int64_t, int64_t>> shared_segments;
};

// The conversation of a session fed with chat messages
// (docs/wire-contract.md "Chat messages"; server/chat_input.h).
struct Conversation {
  // True while every token of the session came from rendered messages and
  // the replies the server generated; false after text or token-id input.
  // Snapshots keep it (SnapshotMeta::conversation); one of format version 1
  // restores a session without.
  bool active = false;
  std::vector<chat::ChatMessage> messages;  // replies as assistant messages
  std::string text;         // exactly the text of the session's tokens
  bool reply_open = false;  // the last message is a generated reply that a
                            // Decode without input extends
};

// One consistent reading of a session for other threads: the stats and
// the busy flag come from the same instant, so a reader that sees
// `busy == false` also sees the stats the last call published before it
// released the session (they are published before the release).
struct SessionView {
  SessionStats stats;
  bool busy = false;
  int64_t last_used_unix_ms = 0;
};

class Session {
 public:
  Session(std::string id, std::string parent_id, const KvStoreConfig& kv,
          const SamplingParams& sampling, uint32_t idle_ttl_seconds,
          std::unique_ptr<ClusteredKvStore> store, std::string tenant = "");

  const std::string& id() const { return id_; }
  // The tenant that created the session (or its fork root); "" anonymous.
  const std::string& tenant() const { return tenant_; }
  const std::string& parent_id() const { return parent_id_; }
  const KvStoreConfig& kv() const { return kv_; }
  const SamplingParams& sampling() const { return sampling_; }
  uint32_t idle_ttl_seconds() const { return idle_ttl_seconds_; }
  int64_t created_unix_ms() const { return created_unix_ms_; }

  // Engine side (holder of the lease only).
  ClusteredKvStore& store() { return *store_; }
  // Replaces the store (e.g. restoring a checkpoint after a cancelled call).
  void set_store(std::unique_ptr<ClusteredKvStore> store);
  // Recomputes the stats snapshot from the store.
  void PublishStats();
  // Logits after the last token in the store (empty if none computed).
  const std::vector<float>& last_logits() const { return last_logits_; }
  void set_last_logits(std::vector<float> l) { last_logits_ = std::move(l); }
  // The last kMaxPenaltyLastN token ids of the session (the sampler's
  // penalty window; not in snapshots: a restored session starts empty).
  const std::vector<int32_t>& recent_tokens() const { return recent_tokens_; }
  void AppendRecentTokens(absl::Span<const int32_t> ids);
  // Engine side or the lease holder, like store().
  Conversation& conversation() { return conversation_; }
  const Conversation& conversation() const { return conversation_; }

  // Cancellation of the call holding the session (CancelSession), any
  // thread. The engine sets the canceller of the job it runs; releasing the
  // lease clears it. CancelRunning: false when the session is idle; when it
  // is leased by a call not yet submitted, that call's job is cancelled as
  // soon as it sets its canceller.
  void SetCanceller(std::function<void()> cancel);
  bool CancelRunning();

  // Any thread.
  SessionView View() const;
  SessionStats stats() const;
  bool busy() const;
  int64_t last_used_unix_ms() const;

 private:
  friend class SessionManager;
  friend class SessionLease;

  const std::string id_, parent_id_, tenant_;
  const KvStoreConfig kv_;
  const SamplingParams sampling_;
  const uint32_t idle_ttl_seconds_;
  const int64_t created_unix_ms_;
  std::unique_ptr<ClusteredKvStore> store_;
  std::vector<float> last_logits_;
  std::vector<int32_t> recent_tokens_;
  Conversation conversation_;

  // std::mutex (not absl::Mutex): ThreadSanitizer sees its ordering.
  mutable std::mutex mu_;
  SessionStats stats_;       // guarded by mu_
  bool busy_ = false;        // guarded by mu_
  int forks_in_flight_ = 0;  // guarded by mu_; shared holds of ForkSession
  bool closed_ = false;      // guarded by mu_
  std::function<void()> canceller_;  // guarded by mu_
  bool cancel_requested_ = false;    // guarded by mu_
  int64_t last_used_unix_ms_;        // guarded by mu_
};

// Exclusive use of a session for one call; releases it when destroyed.
class SessionLease {
 public:
  SessionLease() = default;
  explicit SessionLease(std::shared_ptr<Session> s) : session_(std::move(s)) {}
  SessionLease(SessionLease&&) = default;
  SessionLease& operator=(SessionLease&&);
  ~SessionLease();

  Session* get() const { return session_.get(); }
  Session* operator->() const { return session_.get(); }
  explicit operator bool() const { return session_ != nullptr; }
  const std::shared_ptr<Session>& shared() const { return session_; }

 private:
  void Release();
  std::shared_ptr<Session> session_;
};

int64_t NowUnixMs();

}  // namespace ckv::server
