// bench_background_load: the controlled load of engine_bench's
// --background-load as a program of its own, for peers that lack the flag
// (bench/peer/ runs it beside llama-bench): one process busy FRACTION of one
// core on a duty cycle of PERIOD_MS, until killed.
//   bench_background_load FRACTION [PERIOD_MS]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/background_load.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s FRACTION [PERIOD_MS]\n", argv[0]);
    return 2;
  }
  ckv::bench::BackgroundLoadOptions o;
  o.fraction = std::atof(argv[1]);
  if (argc == 3) o.period_ms = std::atof(argv[2]);
  if (o.fraction <= 0) {
    std::fprintf(stderr, "%s: FRACTION must be in (0, 1]\n", argv[0]);
    return 2;
  }
  auto load = ckv::bench::BackgroundLoad::Start(o);
  if (!load.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[0],
                 std::string(load.status().message()).c_str());
    return 2;
  }
  for (;;) pause();  // the child dies with this process (PR_SET_PDEATHSIG)
}
