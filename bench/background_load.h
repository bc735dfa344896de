// A controlled background load for contention measurements: a separate
// process that keeps one core busy a fraction F of the time with a fixed
// duty cycle (busy F * period, then asleep the rest), like another tenant's
// process sharing the machine. It is not pinned: the kernel's scheduler
// places it, as it would any other process.
#pragma once

#include <sys/types.h>

#include "absl/status/statusor.h"

namespace ckv::bench {

struct BackgroundLoadOptions {
  double fraction = 0.0;  // of one core, in [0, 1]; 0: no load
  double period_ms = 10.0;
};

// Owns the load process; the destructor stops it (SIGKILL + waitpid). The
// child also dies with the parent (PR_SET_PDEATHSIG).
class BackgroundLoad {
 public:
  // fraction 0: no process. INVALID_ARGUMENT outside [0, 1] or period <= 0.
  static absl::StatusOr<BackgroundLoad> Start(const BackgroundLoadOptions& o);
  BackgroundLoad() = default;
  BackgroundLoad(BackgroundLoad&& other) noexcept;
  BackgroundLoad& operator=(BackgroundLoad&& other) noexcept;
  ~BackgroundLoad();

  bool running() const { return pid_ > 0; }
  // CPU seconds the load process has used so far (0 without one), from
  // /proc/PID/stat: lets a report state the load it actually got.
  double CpuSeconds() const;

 private:
  void Stop();
  pid_t pid_ = -1;
};

}  // namespace ckv::bench

namespace ckv::bench {

// Time this process's threads spent runnable but waiting for a CPU
// (the second field of /proc/self/task/*/schedstat, summed), in seconds;
// 0 where schedstat is not available.
double ProcessRunDelaySeconds();

}  // namespace ckv::bench
