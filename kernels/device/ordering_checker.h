// The stream-ordering checker of FakeRuntime: vector clocks per agent (the
// host is agent 0, stream i is agent i + 1). Every access to a byte range
// (an op's declared reads and writes, a host access to pinned memory) is
// checked, when it is issued, against the earlier accesses to overlapping
// bytes: two accesses of which one writes must be ordered by the clocks
// (same agent, event record -> wait, host synchronisation), else a race is
// reported with both call sites. Issue-time checking makes the report the
// same under every schedule. The history is indexed by address (ranges up
// to kShortBytes in an ordered map, longer ones in a list), so an access
// looks only at records near it. Not thread-safe (FakeRuntime's lock).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "kernels/device/runtime.h"

namespace ckv::kernels::device {

class OrderingChecker {
 public:
  using Clock = std::vector<uint32_t>;
  static constexpr int kHost = 0;

  OrderingChecker();
  int AddAgent();  // a stream: returns its agent id
  int AddEvent();  // returns its id

  // The host issues work on `agent`: it is ordered after the host's past.
  void Issue(int agent);
  // One access by `agent` at its current clock (Issue first for streams).
  void Access(int agent, uint64_t begin, int64_t bytes, bool write,
              const std::string& what, Site site);
  void Record(int event, int agent);
  void Wait(int agent, int event);
  void HostJoinAgent(int agent);
  void HostJoinEvent(int event);
  void HostJoinAll();
  // Drops the history of freed bytes.
  void Forget(uint64_t begin, int64_t bytes);

  // Reports so far (the first kMaxReports), oldest first.
  const std::vector<std::string>& races() const { return races_; }
  int64_t race_count() const { return race_count_; }

 private:
  struct AccessRecord {
    uint64_t begin, end;
    bool write;
    int agent;
    uint32_t tick;  // the agent's own clock entry at the access
    std::string what;
    Site site;
    uint64_t seq;  // issue order: overlapping records are checked in it
  };
  // Ranges of at most this many bytes are indexed by their start.
  static constexpr uint64_t kShortBytes = uint64_t{1} << 16;
  // Where an overlapping record is: in short_ (its start) or long_.
  struct Match {
    uint64_t seq;
    bool in_short;
    uint64_t key;  // short_: the start; long_: the index
  };
  static void Join(Clock& into, const Clock& from);
  uint32_t& At(Clock& c, int agent);
  static uint32_t Get(const Clock& c, int agent);

  static constexpr size_t kMaxReports = 16;
  std::vector<Clock> agents_;
  std::vector<Clock> events_;
  absl::btree_multimap<uint64_t, AccessRecord> short_;  // by begin
  std::vector<AccessRecord> long_;                      // in seq order
  uint64_t next_seq_ = 0;
  std::vector<Match> matches_;  // Access scratch
  std::vector<std::string> races_;
  int64_t race_count_ = 0;
};

}  // namespace ckv::kernels::device
