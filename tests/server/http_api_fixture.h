// The served-API fixture of http_api_test: a server started in this
// process on a random model with bearer tokens (tenants alice and bob),
// called with cpp-httplib's client over loopback.
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/http/http_server.h"
#include "server/metrics.h"
#include "server/server_runner.h"
#include "tests/model/test_util.h"
#include "tests/server/small_server_config.h"

namespace ckv::server::http {

inline constexpr char kToken[] = "http-test-token";         // tenant alice
inline constexpr char kBobToken[] = "http-test-token-bob";  // tenant bob

// The random model the served API runs.
inline RandomModelSpec Spec() {
  RandomModelSpec s;
  s.layers = 2;
  s.dim = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 128;
  s.seed = 11;
  return s;
}

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_path_ = ckv::testing::RandomModelPath("http", Spec());
    const std::string tokens = ckv::testing::TempPath("http_tokens");
    std::ofstream(tokens) << kToken << " alice\n" << kBobToken << " bob\n";
    ServerConfig c = testing::SmallServerConfig(model_path_);
    c.http_listen_address = "127.0.0.1:0";
    c.auth_tokens_file = tokens;
    c.limits.max_prompt_tokens = 256;
    Configure(c);
    metrics_ = ServerMetrics::Create();
    auto server = ClusterKvServer::Start(c, metrics_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto port = StartHttpApi(*server_);
    ASSERT_TRUE(port.ok()) << port.status();
    ASSERT_GT(*port, 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    client_->set_read_timeout(60);
  }

  // A fixture's own settings on top of the small server's.
  virtual void Configure(ServerConfig& c) { (void)c; }

  httplib::Result Post(const std::string& path, const std::string& body,
                       httplib::Headers headers = {}) {
    headers.emplace("Authorization", std::string("Bearer ") + kToken);
    return client_->Post(path.c_str(), headers, body, "application/json");
  }

  // The error object of a failed response, after checking its status.
  static nlohmann::json ErrorOf(const httplib::Result& res, int status) {
    EXPECT_TRUE(res);
    if (!res) return nlohmann::json();
    EXPECT_EQ(res->status, status) << res->body;
    const nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
    EXPECT_TRUE(j.contains("error")) << res->body;
    if (!j.contains("error")) return nlohmann::json();
    const nlohmann::json& e = j["error"];
    for (const char* key : {"message", "type", "param", "code"}) {
      EXPECT_TRUE(e.contains(key)) << key << " in " << res->body;
    }
    return e;
  }

  std::string model_path_;
  std::unique_ptr<ServerMetrics> metrics_;  // outlives the server
  std::unique_ptr<ClusterKvServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace ckv::server::http
