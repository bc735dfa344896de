#include "bench/background_load.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ckv::bench {
namespace {

int64_t NowNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// The child's loop: spins busy_ns of every period_ns, sleeps the rest (on an
// absolute schedule, so a late wake-up does not shift the duty cycle).
[[noreturn]] void RunLoad(int64_t busy_ns, int64_t period_ns) {
  volatile uint64_t sink = 0;
  int64_t start = NowNanos();
  for (;;) {
    while (NowNanos() - start < busy_ns) {
      for (int i = 0; i < 1000; ++i) sink = sink + i;
    }
    start += period_ns;
    if (busy_ns < period_ns) {
      timespec until{static_cast<time_t>(start / 1000000000),
                     static_cast<long>(start % 1000000000)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr);
    }
    if (NowNanos() - start > period_ns) start = NowNanos();  // fell behind
  }
}

}  // namespace

absl::StatusOr<BackgroundLoad> BackgroundLoad::Start(
    const BackgroundLoadOptions& o) {
  if (!(o.fraction >= 0.0 && o.fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--background-load: ", o.fraction, " is not in [0, 1] (of one core)"));
  }
  if (!(o.period_ms > 0.0)) {
    return absl::InvalidArgumentError("--background-period-ms must be > 0");
  }
  BackgroundLoad load;
  if (o.fraction == 0.0) return load;
  const int64_t period_ns = static_cast<int64_t>(o.period_ms * 1e6);
  const int64_t busy_ns = static_cast<int64_t>(o.fraction * period_ns);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed for background load");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    RunLoad(busy_ns, period_ns);
  }
  load.pid_ = pid;
  return load;
}

BackgroundLoad::BackgroundLoad(BackgroundLoad&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)) {}

BackgroundLoad& BackgroundLoad::operator=(BackgroundLoad&& other) noexcept {
  if (this != &other) {
    Stop();
    pid_ = std::exchange(other.pid_, -1);
  }
  return *this;
}

BackgroundLoad::~BackgroundLoad() { Stop(); }

void BackgroundLoad::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

double BackgroundLoad::CpuSeconds() const {
  if (pid_ <= 0) return 0.0;
  std::ifstream f(absl::StrCat("/proc/", pid_, "/stat"));
  std::string text((std::istreambuf_iterator<char>(f)),
                   std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis; utime, stime are the
  // 12th and 13th of them (14th and 15th of the line).
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0.0;
  std::vector<std::string> fields =
      absl::StrSplit(text.substr(paren + 2), ' ', absl::SkipEmpty());
  if (fields.size() < 13) return 0.0;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return (std::stod(fields[11]) + std::stod(fields[12])) / ticks;
}

}  // namespace ckv::bench

namespace ckv::bench {

double ProcessRunDelaySeconds() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0.0;
  double total = 0.0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(absl::StrCat("/proc/self/task/", e->d_name, "/schedstat"));
    uint64_t run_ns = 0, wait_ns = 0;
    if (f >> run_ns >> wait_ns) total += wait_ns * 1e-9;
  }
  closedir(dir);
  return total;
}

}  // namespace ckv::bench
