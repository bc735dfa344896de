// The server configuration the loopback tests share: ephemeral port, no
// /metrics, and sparse layers with small segments so that clustering and
// selection really run on the tiny test models.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/backend/backend.h"
#include "server/server_config.h"

namespace ckv::server::testing {

// The backend of the loopback tests: CLUSTERKV_TEST_BACKEND (a --backend
// name), auto when unset, so that ctest runs suites once more on the fake
// device (tests/server/CMakeLists.txt, the *_fake tests). An unknown name
// aborts: a typo must not silently test the CPU.
inline BackendKind TestBackend() {
  const char* name = std::getenv("CLUSTERKV_TEST_BACKEND");
  if (name == nullptr || *name == '\0') return BackendKind::kAuto;
  auto kind = ParseBackendFlag(name);
  if (!kind.ok()) {
    std::fprintf(stderr, "CLUSTERKV_TEST_BACKEND: %s\n",
                 std::string(kind.status().message()).c_str());
    std::abort();
  }
  return *kind;
}

inline ServerConfig SmallServerConfig(const std::string& model_path) {
  ServerConfig c;
  c.model_path = model_path;
  c.backend = TestBackend();
  // CLUSTERKV_TEST_FAKE_SCHEDULE: the fake device's schedule (inline when
  // unset; an unknown name aborts).
  const char* schedule = std::getenv("CLUSTERKV_TEST_FAKE_SCHEDULE");
  if (schedule != nullptr &&
      !kernels::device::ParseSchedule(schedule, &c.fake_schedule)) {
    std::fprintf(stderr, "CLUSTERKV_TEST_FAKE_SCHEDULE: unknown '%s'\n",
                 schedule);
    std::abort();
  }
  // CLUSTERKV_TEST_STREAM_CHUNK_BYTES: segments offloaded and every
  // attention that copies more than that many bytes streamed (device
  // backends; the *_streamed tests). Not a number: aborts.
  if (const char* chunk = std::getenv("CLUSTERKV_TEST_STREAM_CHUNK_BYTES")) {
    char* end = nullptr;
    const long long bytes = std::strtoll(chunk, &end, 10);
    if (end == chunk || *end != '\0' || bytes <= 0) {
      std::fprintf(stderr, "CLUSTERKV_TEST_STREAM_CHUNK_BYTES: bad '%s'\n",
                   chunk);
      std::abort();
    }
    c.kv_residency = KvResidency::kOffload;
    c.kv_stream_chunk_bytes = bytes;
  }
  c.listen_address = "127.0.0.1:0";
  c.metrics_address = "";
  c.threads = 2;
  c.prefill_chunk = 64;
  c.kv.policy = KvPolicy::kClusterKv;
  c.kv.dense_layers = 1;
  c.kv.sink_tokens = 4;
  c.kv.tokens_per_cluster = 16;
  c.kv.window = 32;
  c.kv.budget = 32;
  c.sampling.temperature = 0.0f;
  c.sampling.max_tokens = 12;
  c.limits.max_session_tokens = 8192;
  return c;
}

}  // namespace ckv::server::testing
