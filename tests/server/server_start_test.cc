// The server's start-up checks of its compute settings: --backend cuda
// without a device and --kernels, refused before anything serves; the
// flags that set new sessions' KV defaults.
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "model/backend/cuda/cuda_backend.h"
#include "server/flags.h"
#include "server/server_runner.h"
#include "tests/server/service_test_util.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, cache_mode);

namespace ckv::server {
namespace {

using testing::BaseConfig;
using testing::Metrics;

// --backend cuda is refused before anything serves, with an error that
// names what is missing: INVALID_ARGUMENT when this build has no CUDA
// backend (the flag parser uses the same check), FAILED_PRECONDITION naming
// the missing driver or device when it has one and no device is usable.
TEST(ServerBackendTest, CudaIsRefusedClearlyWithoutItsDevice) {
  auto kind = ParseBackendKind("cuda");
  ASSERT_TRUE(kind.ok());
  ServerConfig c = BaseConfig();
  c.backend = *kind;
  auto flag = ParseBackendFlag("cuda");
  if (!CudaBackendBuilt()) {
    EXPECT_EQ(flag.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(flag.status().message().find("--backend cuda: this build has no"),
              absl::string_view::npos)
        << flag.status();
    auto s = ClusterKvServer::Start(c, Metrics());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  } else if (!CudaDeviceStatus().ok()) {
    ASSERT_TRUE(flag.ok()) << flag.status();
    auto s = ClusterKvServer::Start(c, Metrics());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition)
        << s.status();
    EXPECT_NE(s.status().message().find("--backend cuda: "),
              absl::string_view::npos)
        << s.status();
    EXPECT_NE(s.status().message().find("CUDA device"), absl::string_view::npos)
        << s.status();
  } else {
    GTEST_SKIP() << "a CUDA device is usable here (the device check runs it)";
  }
  EXPECT_EQ(ParseBackendFlag("gpu").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseBackendFlag("auto"), BackendKind::kAuto);
  EXPECT_EQ(*ParseBackendFlag("cpu"), BackendKind::kCpu);
  EXPECT_EQ(*ParseBackendFlag("fake"), BackendKind::kFake);
  EXPECT_EQ(ResolveBackendKind(BackendKind::kAuto), BackendKind::kCpu);
}

// --kernels: an unknown table, or one this CPU lacks, is refused before
// anything serves (INVALID_ARGUMENT naming the flag); a table the CPU has is
// what GetServerInfo's kernels field and every op then use.
TEST(ServerKernelsTest, KernelTableIsCheckedAndApplied) {
  ServerConfig c = BaseConfig();
  c.cpu_kernels = "avx9000";
  auto bad = ClusterKvServer::Start(c, Metrics());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--kernels avx9000"),
            absl::string_view::npos)
      << bad.status();
  const kernels::cpu::CpuFeatures& f = kernels::cpu::GetCpuFeatures();
  const bool has_bf16 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16;
  c.cpu_kernels = "avx512_bf16";
  auto s = ClusterKvServer::Start(c, Metrics());
  if (!has_bf16) {
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    return;
  }
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_STREQ(kernels::cpu::KernelSetName(), "avx512_bf16");
  (*s)->Drain(absl::ZeroDuration());
  s->reset();
  ASSERT_TRUE(kernels::cpu::SelectKernels("auto"));  // for the next tests
}

// --cache-mode sets new sessions' default cache mode (zero_copy unless
// given); a name that is no cache mode is refused naming the flag.
TEST(ServerFlagsTest, CacheModeSetsTheSessionsDefault) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_model, testing::ModelPath());
  auto c = ServerConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kv.cache_mode, CacheMode::kZeroCopy);
  absl::SetFlag(&FLAGS_cache_mode, "copy");
  c = ServerConfigFromFlags();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kv.cache_mode, CacheMode::kCopy);
  absl::SetFlag(&FLAGS_cache_mode, "arena");
  c = ServerConfigFromFlags();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("--cache-mode"), absl::string_view::npos)
      << c.status();
}

}  // namespace
}  // namespace ckv::server
