#include "client/progress.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckv::client {
namespace {

int Percent(const ProgressSnapshot& p) {
  if (p.total <= 0) return 0;
  return static_cast<int>(std::clamp<int64_t>(p.done * 100 / p.total, 0, 100));
}

std::string RateText(const ProgressSnapshot& p) {
  if (p.tokens_per_second <= 0) return "-- tok/s";
  return absl::StrFormat("%.0f tok/s", p.tokens_per_second);
}

}  // namespace

std::string FormatEta(double seconds) {
  if (seconds < 0 || seconds > 360000) return "--:--";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) {
    return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  }
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

double EtaSeconds(const ProgressSnapshot& p) {
  if (p.total <= 0) return -1;
  if (p.done >= p.total) return 0;
  if (p.tokens_per_second <= 0) return -1;
  return static_cast<double>(p.total - p.done) / p.tokens_per_second;
}

std::string FormatProgressBar(const ProgressSnapshot& p, int bar_width) {
  const int pct = Percent(p);
  const int filled = p.total > 0
                         ? static_cast<int>(std::clamp<int64_t>(
                               p.done * bar_width / p.total, 0, bar_width))
                         : 0;
  return absl::StrFormat("prefill [%s%s] %3d%%  %d/%d tok  %s  ETA %s",
                         std::string(filled, '#'),
                         std::string(bar_width - filled, '.'), pct, p.done,
                         p.total, RateText(p), FormatEta(EtaSeconds(p)));
}

std::string FormatProgressLine(const ProgressSnapshot& p) {
  return absl::StrFormat("prefill: %d%% (%d/%d tokens, %s, ETA %s)", Percent(p),
                         p.done, p.total, RateText(p),
                         FormatEta(EtaSeconds(p)));
}

ProgressReporter::ProgressReporter(std::ostream& err, ProgressStyle style)
    : err_(err), style_(style) {}

ProgressSnapshot ProgressReporter::Snapshot(int64_t done, int64_t total) const {
  ProgressSnapshot p{done, total, 0};
  const double dt =
      std::chrono::duration<double>(Clock::now() - start_).count();
  if (dt > 0 && done > start_done_) {
    p.tokens_per_second = static_cast<double>(done - start_done_) / dt;
  }
  return p;
}

void ProgressReporter::Update(int64_t done, int64_t total) {
  if (style_ == ProgressStyle::kOff) return;
  const Clock::time_point now = Clock::now();
  if (!started_) {
    started_ = true;
    start_ = now;
    start_done_ = done;
  }
  last_ = Snapshot(done, total);
  if (style_ == ProgressStyle::kBar) {
    // Redraw at most 10 times a second (always the final state).
    if (drawn_ && done < total &&
        now - last_draw_ < std::chrono::milliseconds(100)) {
      return;
    }
    last_draw_ = now;
    drawn_ = true;
    err_ << '\r' << FormatProgressBar(last_, 30) << "\x1b[K" << std::flush;
    return;
  }
  const int pct = Percent(last_);
  if (next_quarter_ > 4 || pct < next_quarter_ * 25) return;
  while (next_quarter_ <= 4 && pct >= next_quarter_ * 25) ++next_quarter_;
  err_ << FormatProgressLine(last_) << std::endl;
}

void ProgressReporter::Finish() {
  if (style_ == ProgressStyle::kBar && drawn_) {
    err_ << '\r' << FormatProgressBar(last_, 30) << "\x1b[K\n" << std::flush;
  }
}

}  // namespace ckv::client
