// Helpers shared by the service_test sources: the tiny model the loopback
// server loads, its configuration and the process's one metrics registry.
#pragma once

#include <string>

#include "model/make_random.h"
#include "server/metrics.h"
#include "server/server_config.h"
#include "tests/model/test_util.h"
#include "tests/server/small_server_config.h"

namespace ckv::server::testing {

inline RandomModelSpec Spec() {
  RandomModelSpec s;
  s.layers = 4;
  s.dim = 128;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 256;
  s.seed = 7;
  return s;
}

inline std::string ModelPath() {
  return ::ckv::testing::RandomModelPath("svc", Spec());
}

inline ServerConfig BaseConfig() {
  ServerConfig c = SmallServerConfig(ModelPath());
  c.limits.max_sessions = 16;
  c.limits.max_prompt_tokens = 1024;
  return c;
}

inline ServerMetrics* Metrics() {
  static ServerMetrics* m = ServerMetrics::Create().release();
  return m;
}

}  // namespace ckv::server::testing
