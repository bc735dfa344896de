// The soak's client threads: each loops over weighted random actions on its
// own sessions (create, prefill, decode, fork, get, close, snapshot,
// generate), including cancelled and deadline-bound streams, concurrent
// calls on one session, requests on unknown or closed ids and invalid
// requests. Every call's gRPC status is tallied under its action and RPC
// and checked against the codes that action may legitimately get.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tests/soak/soak_util.h"

namespace ckv::soak {

// Counts of one client thread (merged at the end).
struct Tally {
  static constexpr size_t kMaxMessages = 40;

  // action -> code name -> calls; rpc -> code name -> calls.
  std::map<std::string, std::map<std::string, int64_t>> by_action;
  std::map<std::string, std::map<std::string, int64_t>> by_rpc;
  // RESOURCE_EXHAUSTED by the limit its message names.
  std::map<std::string, int64_t> exhausted_by_limit;
  int64_t requests = 0;
  int64_t unexpected = 0;
  int64_t sessions_created = 0;  // CreateSession and ForkSession successes
  // ABORTED on a session shortly after a call on it was cancelled (the
  // cancelled call reached the server late): expected, counted apart.
  int64_t aborted_after_cancel = 0;
  int64_t generated_tokens = 0;
  int64_t prefilled_tokens = 0;
  std::vector<std::string> unexpected_messages;  // the first kMaxMessages

  void Merge(const Tally& other);
};

// What the workload needs to know of the server (from GetServerInfo).
struct WorkloadConfig {
  int64_t max_prompt_tokens = 1024;
  int64_t max_session_tokens = 2048;
  int vocab_size = 259;
  bool snapshots = false;      // the server runs with --snapshot-dir
  int max_owned_sessions = 3;  // per client thread, forks included
  uint64_t seed = 1;
};

class Worker {
 public:
  Worker(int index, const WorkloadConfig& config, const std::string& address,
         std::atomic<int64_t>* requests);

  // Runs actions until `stop`; then closes the sessions it owns.
  void Run(const std::atomic<bool>& stop);
  const Tally& tally() const { return tally_; }

 private:
  using Codes = std::vector<grpc::StatusCode>;
  struct Owned {
    std::string id;
    int64_t tokens = 0;
  };
  enum class Action {
    kCreate,
    kCreateInvalid,
    kPrefill,
    kPrefillHuge,
    kPrefillBadUtf8,
    kDecode,
    kDecodeCancel,
    kDecodeDeadline,
    kDecodeInvalid,
    kFork,
    kGet,
    kClose,
    kSnapshot,
    kUnknownId,
    kMissingId,
    kBusy,
    kGenerate,
    kGenerateInvalid,
    kInfo,
    kCount
  };

  Action Pick();
  void Step(Action a);
  // Records one call; false (and counted, message kept) when `s` is not in
  // `expected`.
  bool Record(const char* action, const char* rpc, const grpc::Status& s,
              const Codes& expected);
  // Counts an unexpected outcome that is not a status code.
  void Fail(const char* action, const std::string& message);

  void DoCreate();
  void DoCreateInvalid();
  void DoPrefill(Owned& s);
  void DoPrefillHuge(Owned& s);
  void DoPrefillBadUtf8(Owned& s);
  void DoDecode(Owned& s, Action kind);
  void DoMultiTurnDecode(Owned& s);
  void DoDecodeInvalid(Owned& s);
  void DoFork(Owned& s);
  void DoGet(Owned& s);
  void DoClose(size_t index);
  void DoSnapshot(Owned& s);
  void DoUnknownId();
  void DoMissingId();
  void DoBusy(Owned& s);
  void DoBusySecond(Owned& s, int which);
  void DoGenerate(bool invalid);
  void DoInfo();
  void BackOff(const grpc::Status& s);
  // After a cancelled or timed-out call: waits until the server released
  // the session and refreshes its token count.
  void Settle(Owned& s, const char* action);
  void CloseAll();
  bool RecentlyCancelled(const std::string& id);

  size_t RandomOwnedIndex();
  void Forget(const std::string& id);
  std::string RandomText(size_t bytes);
  std::string BadUtf8(size_t bytes);
  v1::KvConfig RandomKv();
  int Uniform(int lo, int hi);  // inclusive
  bool Chance(double p);

  const int index_;
  const WorkloadConfig config_;
  std::unique_ptr<v1::ClusterKv::Stub> stub_;
  std::atomic<int64_t>* requests_;
  std::mt19937_64 rng_;
  std::vector<Owned> owned_;
  std::vector<std::string> closed_;  // recently closed ids (ring)
  std::string session_;  // the session of the current action ("": none)
  // Sessions with a cancelled or timed-out call: when it ended.
  std::map<std::string, std::chrono::steady_clock::time_point> cancelled_;
  Tally tally_;
};

}  // namespace ckv::soak
