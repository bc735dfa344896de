// clusterkv_soak: load and soak test of clusterkv-server over loopback gRPC.
// N client threads run weighted random mixes of valid and invalid requests
// (soak_workload.h) for a bounded time while a sampler records the server's
// resident memory and KV bytes. Afterwards every session is closed and the
// server's KV capacity must be back at its baseline. Prints a summary table
// and writes JSON; exits 1 on any unexpected status code, KV bytes not
// back at the baseline, a spawned server that died or did not exit 0 on
// SIGTERM, or RSS growth above --max-rss-growth-mb-per-hour (when set).
//
//   clusterkv_soak --spawn [--server-binary B] [--model M] [--clients 8]
//                  [--seconds 30] [--seed 1] [--json out.json] [--snapshots]
//   clusterkv_soak --server 127.0.0.1:50051 [--server-pid PID] ...
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/flag_spelling.h"
#include "tests/soak/soak_report.h"
#include "tests/soak/soak_util.h"
#include "tests/soak/soak_workload.h"

#ifndef CLUSTERKV_SERVER_BIN
#define CLUSTERKV_SERVER_BIN "clusterkv-server"
#endif

ABSL_FLAG(std::string, server, "", "address of a running server (no spawn)");
ABSL_FLAG(int, server_pid, 0, "its pid, to sample its RSS (0: no RSS)");
ABSL_FLAG(bool, spawn, false,
          "start clusterkv-server on 127.0.0.1:0 with a random model");
ABSL_FLAG(std::string, server_binary, CLUSTERKV_SERVER_BIN,
          "clusterkv-server binary for --spawn");
ABSL_FLAG(std::string, model, "", "model for --spawn (empty: a random one)");
ABSL_FLAG(std::string, work_dir, "",
          "folder for the model, log and snapshots (empty: a temp folder)");
ABSL_FLAG(int, clients, 8, "concurrent client threads");
ABSL_FLAG(double, seconds, 30, "duration of the load");
ABSL_FLAG(uint64_t, seed, 1, "random seed of the workload");
ABSL_FLAG(std::string, json, "", "write the JSON report here");
ABSL_FLAG(bool, snapshots, false,
          "the server has --snapshot-dir (with --spawn: give it one): "
          "SnapshotSession is part of the mix");
ABSL_FLAG(int, server_threads, 2, "--threads of a spawned server");
ABSL_FLAG(int, max_sessions, 20, "limit of a spawned server");
ABSL_FLAG(int64_t, max_host_kv_bytes, int64_t{8} << 20,
          "limit of a spawned server (1 KiB per token)");
ABSL_FLAG(int64_t, max_prompt_tokens, 1024, "limit of a spawned server");
ABSL_FLAG(int64_t, max_session_tokens, 2048, "limit of a spawned server");
ABSL_FLAG(int, max_queued_requests, 16, "limit of a spawned server");
ABSL_FLAG(double, max_rss_growth_mb_per_hour, 0,
          "fail when the RSS trend exceeds this (0: report only)");

namespace ckv::soak {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::vector<std::string> ServerArgs(const std::string& model,
                                    const std::string& snapshot_dir) {
  std::vector<std::string> a = {
      "--model",
      model,
      "--listen",
      "127.0.0.1:0",
      "--metrics-address=",
      "--threads",
      absl::StrCat(absl::GetFlag(FLAGS_server_threads)),
      "--prefill-chunk",
      "64",
      "--policy",
      "clusterkv",
      "--dense-layers",
      "1",
      "--sink-tokens",
      "4",
      "--tokens-per-cluster",
      "16",
      "--window",
      "32",
      "--budget",
      "32",
      "--drain-grace-seconds",
      "2",
      absl::StrCat("--max-sessions=", absl::GetFlag(FLAGS_max_sessions)),
      absl::StrCat("--max-host-kv-bytes=",
                   absl::GetFlag(FLAGS_max_host_kv_bytes)),
      absl::StrCat("--max-prompt-tokens=",
                   absl::GetFlag(FLAGS_max_prompt_tokens)),
      absl::StrCat("--max-session-tokens=",
                   absl::GetFlag(FLAGS_max_session_tokens)),
      absl::StrCat("--max-queued-requests=",
                   absl::GetFlag(FLAGS_max_queued_requests))};
  if (!snapshot_dir.empty()) {
    a.push_back("--snapshot-dir");
    a.push_back(snapshot_dir);
  }
  return a;
}

Capacity CapacityOf(const v1::ServerInfo& info) {
  Capacity c;
  c.free_sessions = info.capacity().free_sessions();
  c.free_host_kv_bytes = info.capacity().free_host_kv_bytes();
  c.free_device_kv_bytes = info.capacity().free_device_kv_bytes();
  c.queued_requests = info.capacity().queued_requests();
  return c;
}

int SessionCount(v1::ClusterKv::Stub& stub) {
  v1::ListSessionsResponse resp;
  return ListSessions(stub, &resp).ok() ? resp.sessions_size() : -1;
}

// Samples RSS and KV bytes until `stop`; prints progress every 10 s.
void SampleLoop(const std::string& address, pid_t pid, Clock::time_point t0,
                const std::atomic<bool>& stop,
                const std::atomic<int64_t>& requests,
                std::vector<Sample>* samples) {
  auto stub = NewStub(address);
  double next_progress = 10;
  while (!stop.load()) {
    Sample s;
    s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    s.rss_bytes = pid > 0 ? ReadRssBytes(pid) : -1;
    v1::ServerInfo info;
    if (GetServerInfo(*stub, &info).ok()) {
      s.host_kv_bytes = info.limits().max_host_kv_bytes() -
                        info.capacity().free_host_kv_bytes();
      s.device_kv_bytes = info.limits().max_device_kv_bytes() -
                          info.capacity().free_device_kv_bytes();
      s.sessions =
          info.limits().max_sessions() - info.capacity().free_sessions();
    }
    samples->push_back(s);
    if (s.seconds >= next_progress) {
      std::fprintf(stderr,
                   "[soak] %5.0f s: %lld requests, %d sessions, host KV %.1f "
                   "MiB, RSS %.1f MiB\n",
                   s.seconds, static_cast<long long>(requests.load()),
                   s.sessions, s.host_kv_bytes / 1048576.0,
                   s.rss_bytes / 1048576.0);
      next_progress += 10;
    }
    std::this_thread::sleep_for(milliseconds(250));
  }
}

// Runs the clients and the sampler for --seconds.
void RunLoad(const std::string& address, pid_t pid,
             const WorkloadConfig& config, SoakResult& r) {
  std::atomic<bool> stop{false}, stop_sampler{false};
  std::atomic<int64_t> requests{0};
  std::vector<std::unique_ptr<Worker>> workers;
  for (int i = 0; i < r.clients; ++i) {
    workers.push_back(std::make_unique<Worker>(i, config, address, &requests));
  }
  const Clock::time_point t0 = Clock::now();
  std::thread sampler(SampleLoop, address, pid, t0, std::cref(stop_sampler),
                      std::cref(requests), &r.samples);
  std::vector<std::thread> threads;
  for (auto& w : workers) {
    threads.emplace_back([&w, &stop] { w->Run(stop); });
  }
  std::this_thread::sleep_for(
      std::chrono::duration<double>(absl::GetFlag(FLAGS_seconds)));
  stop = true;
  for (std::thread& t : threads) t.join();
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  stop_sampler = true;
  sampler.join();
  for (auto& w : workers) r.tally.Merge(w->tally());
}

// After the clients closed their sessions: waits (up to 20 s, for jobs of
// cancelled calls to end) until the capacity and session count are back.
void CheckBaseline(v1::ClusterKv::Stub& stub, int sessions_before,
                   SoakResult& r) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (true) {
    v1::ServerInfo info;
    if (GetServerInfo(stub, &info).ok()) r.end = CapacityOf(info);
    r.sessions_left = SessionCount(stub);
    r.kv_bytes_baseline_ok =
        r.end == r.baseline && r.sessions_left == sessions_before;
    if (r.kv_bytes_baseline_ok || Clock::now() > deadline) return;
    std::this_thread::sleep_for(milliseconds(100));
  }
}

int CountSnapshotFiles(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    n += e.path().extension() == ".ckvsnap";
  }
  return ec ? -1 : n;
}

void Judge(SoakResult& r, bool spawned) {
  std::vector<std::string> why;
  if (r.tally.unexpected > 0) {
    why.push_back(absl::StrCat(r.tally.unexpected, " unexpected outcome(s)"));
  }
  if (!r.kv_bytes_baseline_ok) why.push_back("KV bytes not back at baseline");
  if (spawned && r.server_exit_code != 0) {
    why.push_back(absl::StrCat("server exit code ", r.server_exit_code));
  }
  if (r.snapshot_files_left > 0) {
    why.push_back(absl::StrCat(r.snapshot_files_left,
                               " snapshot file(s) of closed sessions left"));
  }
  const double max_growth = absl::GetFlag(FLAGS_max_rss_growth_mb_per_hour);
  const double growth = RssGrowthMiBPerHour(r.samples);
  if (max_growth > 0 && growth > max_growth) {
    why.push_back(
        absl::StrFormat("RSS growth %.1f MiB/hour > %.1f", growth, max_growth));
  }
  for (size_t i = 0; i < why.size(); ++i) {
    r.failure += (i ? "; " : "") + why[i];
  }
}

// Reads limits and the baseline, runs the load, checks the aftermath.
int Soak(const std::string& address, ServerProcess* server,
         const std::string& snapshot_dir) {
  auto stub = NewStub(address);
  v1::ServerInfo info;
  if (grpc::Status st = GetServerInfo(*stub, &info); !st.ok()) {
    std::cerr << "GetServerInfo failed: " << st.error_message() << "\n";
    return 1;
  }
  SoakResult r;
  r.clients = absl::GetFlag(FLAGS_clients);
  r.seed = absl::GetFlag(FLAGS_seed);
  r.baseline = CapacityOf(info);
  const int sessions_before = SessionCount(*stub);
  WorkloadConfig config;
  config.max_prompt_tokens = info.limits().max_prompt_tokens();
  config.max_session_tokens = info.limits().max_session_tokens();
  config.vocab_size = info.model().vocab_size();
  config.snapshots = absl::GetFlag(FLAGS_snapshots);
  config.seed = r.seed;
  const pid_t pid =
      server != nullptr ? server->pid() : absl::GetFlag(FLAGS_server_pid);
  RunLoad(address, pid, config, r);
  CheckBaseline(*stub, sessions_before, r);
  if (server != nullptr) {
    if (!server->Running()) std::cerr << "the server died during the run\n";
    r.server_exit_code = server->Stop();
  }
  if (!snapshot_dir.empty())
    r.snapshot_files_left = CountSnapshotFiles(snapshot_dir);
  Judge(r, server != nullptr);
  PrintSummary(r, std::cout);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream(path) << ToJson(r).dump(2) << "\n";
    std::cout << "JSON: " << path << "\n";
  }
  if (server != nullptr && !r.failure.empty()) {
    std::cout << "server log: " << server->log_path() << "\n";
  }
  return r.failure.empty() ? 0 : 1;
}

int SpawnAndSoak() {
  std::string dir = absl::GetFlag(FLAGS_work_dir);
  const bool temporary = dir.empty();  // removed after a passing run
  if (temporary) {
    dir = (fs::temp_directory_path() / absl::StrCat("ckv_soak_", ::getpid()))
              .string();
  }
  fs::create_directories(dir);
  std::string model = absl::GetFlag(FLAGS_model);
  if (model.empty()) {
    model = dir + "/soak_model.gguf";
    if (auto st = WriteSoakModel(model); !st.ok()) {
      std::cerr << "cannot write the model: " << st << "\n";
      return 1;
    }
  }
  std::string snapshot_dir;
  if (absl::GetFlag(FLAGS_snapshots)) {
    snapshot_dir = dir + "/snapshots";
    fs::remove_all(snapshot_dir);
  }
  auto server = ServerProcess::Start(absl::GetFlag(FLAGS_server_binary),
                                     ServerArgs(model, snapshot_dir),
                                     dir + "/server.log");
  if (!server.ok()) {
    std::cerr << "cannot start the server: " << server.status() << "\n";
    return 1;
  }
  std::cout << "server pid " << (*server)->pid() << " on "
            << (*server)->address() << ", log " << (*server)->log_path()
            << "\n";
  const int rc = Soak((*server)->address(), server->get(), snapshot_dir);
  server->reset();
  if (rc == 0 && temporary) fs::remove_all(dir);
  return rc;
}

}  // namespace
}  // namespace ckv::soak

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "clusterkv_soak (--spawn | --server ADDR) [--clients N] [--seconds S] "
      "[--seed N] [--json PATH] [--snapshots]");
  ckv::DashesToUnderscores(argc, argv);
  absl::ParseCommandLine(argc, argv);
  const std::string address = absl::GetFlag(FLAGS_server);
  if (absl::GetFlag(FLAGS_spawn) == !address.empty()) {
    std::cerr << "give exactly one of --spawn and --server ADDR\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_clients) < 1 || absl::GetFlag(FLAGS_seconds) <= 0) {
    std::cerr << "--clients and --seconds must be > 0\n";
    return 2;
  }
  if (!address.empty()) return ckv::soak::Soak(address, nullptr, "");
  return ckv::soak::SpawnAndSoak();
}
