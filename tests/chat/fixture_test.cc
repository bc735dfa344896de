// Every case of tests/fixtures/chat/ (templates rendered by Jinja2 as
// transformers configures it): byte-exact output, or an error where the
// reference raised one.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace ckv::chat {
namespace {

const std::filesystem::path kDir =
    std::filesystem::path(CLUSTERKV_FIXTURES_DIR) / "chat";

std::string ReadAll(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::filesystem::path> CaseFiles() {
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::is_directory(kDir)) return files;
  for (const auto& e : std::filesystem::directory_iterator(kDir)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 11 && name.substr(name.size() - 11) == ".cases.json") {
      files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ChatFixtureTest, AllTemplatesAndCases) {
  const auto files = CaseFiles();
  // The README lists 10 templates x 5 conversations; a missing file fails.
  ASSERT_EQ(files.size(), 10u) << "fixture folder " << kDir;
  int cases = 0, errors = 0;
  for (const auto& file : files) {
    SCOPED_TRACE(file.filename().string());
    const auto spec = nlohmann::ordered_json::parse(ReadAll(file));
    const auto template_path = kDir / spec["template"].get<std::string>();
    ASSERT_TRUE(std::filesystem::exists(template_path)) << template_path;
    auto tmpl = ChatTemplate::Parse(ReadAll(template_path));
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    ChatRenderOptions options;
    if (spec["bos_token"].is_string()) options.bos_token = spec["bos_token"];
    if (spec["eos_token"].is_string()) options.eos_token = spec["eos_token"];
    for (const auto& c : spec["cases"]) {
      SCOPED_TRACE(c["name"].get<std::string>());
      auto messages = MessagesFromJson(c["messages"].dump());
      ASSERT_TRUE(messages.ok()) << messages.status();
      options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      auto text = tmpl->Render(*messages, options);
      ++cases;
      if (c.contains("error")) {
        ++errors;
        ASSERT_FALSE(text.ok()) << "rendered instead of failing: " << *text;
        const std::string want = c["error"];
        EXPECT_EQ(std::string(text.status().message()), want);
      } else {
        ASSERT_TRUE(text.ok()) << text.status();
        EXPECT_EQ(*text, c["expected"].get<std::string>());
      }
    }
  }
  EXPECT_EQ(cases, 50);
  EXPECT_GE(errors, 1);
}

}  // namespace
}  // namespace ckv::chat
