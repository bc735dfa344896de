// Prefill progress on stderr: a bar redrawn in place on a terminal, plain
// lines at every 25% otherwise.
#ifndef CLUSTERKV_CLIENT_PROGRESS_H_
#define CLUSTERKV_CLIENT_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace ckv::client {

struct ProgressSnapshot {
  int64_t done = 0;
  int64_t total = 0;
  double tokens_per_second = 0;  // 0 = unknown
};

// "0:07", "12:34", "1:02:03"; "--:--" when unknown (negative or huge).
std::string FormatEta(double seconds);
// Seconds left at the current rate; negative when unknown.
double EtaSeconds(const ProgressSnapshot& p);
// "prefill [#########.........]  45%  450/1000 tok  1520 tok/s  ETA 0:01"
std::string FormatProgressBar(const ProgressSnapshot& p, int bar_width);
// "prefill: 25% (250/1000 tokens, 1520 tok/s, ETA 0:01)"
std::string FormatProgressLine(const ProgressSnapshot& p);

enum class ProgressStyle { kBar, kLines, kOff };

class ProgressReporter {
 public:
  ProgressReporter(std::ostream& err, ProgressStyle style);

  void Update(int64_t done, int64_t total);
  // Draws the final state and ends the bar's line.
  void Finish();

 private:
  using Clock = std::chrono::steady_clock;
  ProgressSnapshot Snapshot(int64_t done, int64_t total) const;

  std::ostream& err_;
  ProgressStyle style_;
  bool started_ = false;
  Clock::time_point start_;
  int64_t start_done_ = 0;
  Clock::time_point last_draw_;
  int next_quarter_ = 1;  // lines: the next 25% step to report
  bool drawn_ = false;
  ProgressSnapshot last_;
};

}  // namespace ckv::client

#endif  // CLUSTERKV_CLIENT_PROGRESS_H_
