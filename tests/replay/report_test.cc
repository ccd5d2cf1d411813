// replay/report.h: the SVG plot tells every policy's line apart.
#include "replay/report.h"

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "eviction/eviction_policy.h"

namespace kvtier::replay {
namespace {

TEST(ReportTest, EveryPolicyOfThePlotHasItsOwnColourAndDash) {
  std::vector<SimResult> results;
  std::vector<std::string> policies = {"opt"};
  for (std::string_view p : eviction::PolicyNames()) policies.emplace_back(p);
  for (int extra = 0; extra < 10; ++extra) policies.push_back("extra-" + std::to_string(extra));
  ASSERT_GE(policies.size(), 19u);  // more than twice the 8 colours
  for (const std::string& p : policies) {
    for (const uint64_t cap : {uint64_t{100}, uint64_t{1000}}) {
      SimResult r;
      r.policy = p;
      r.capacity_blocks = cap;
      r.input_tokens = 100;
      r.hit_tokens = cap / 20;
      results.push_back(r);
    }
  }
  const std::string svg = FormatSvg(results, "test");
  const std::regex line(
      "<polyline fill=\"none\" stroke=\"(#[0-9a-f]{6})\" stroke-width=\"2\""
      "( stroke-dasharray=\"[0-9,]+\")? points=");
  std::set<std::pair<std::string, std::string>> styles;
  size_t lines = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), line); it != std::sregex_iterator();
       ++it) {
    ++lines;
    styles.insert({(*it)[1].str(), (*it)[2].str()});
  }
  EXPECT_EQ(lines, policies.size());
  EXPECT_EQ(styles.size(), policies.size()) << svg;
}

// Every CSV row has the header's fields, each under its name, with and
// without the optional columns.
TEST(ReportTest, CsvRowsHaveTheHeadersFields) {
  const auto fields = [](const std::string& line) {
    std::vector<std::string> out(1);
    for (char c : line) {
      if (c == ',') {
        out.emplace_back();
      } else {
        out.back() += c;
      }
    }
    return out;
  };
  SimResult r;
  r.policy = "lru";
  r.capacity_blocks = 100;
  r.block_refs = 10;
  r.blocks_moved = 3;
  r.bytes_moved = 12345;
  r.seconds = 0.5;
  SimResult textbook = r;
  textbook.per_block = true;
  SimResult ahead = r;
  ahead.lookahead_requests = 10;
  for (const std::vector<SimResult>& results :
       std::vector<std::vector<SimResult>>{{r}, {r, textbook}, {r, ahead}, {r, textbook, ahead}}) {
    const std::string csv = FormatCsv(results);
    std::vector<std::string> lines;
    for (size_t at = 0, nl; (nl = csv.find('\n', at)) != std::string::npos; at = nl + 1) {
      lines.push_back(csv.substr(at, nl - at));
    }
    ASSERT_EQ(lines.size(), results.size() + 1) << csv;
    const std::vector<std::string> header = fields(lines[0]);
    for (size_t i = 1; i < lines.size(); ++i) {
      const std::vector<std::string> row = fields(lines[i]);
      ASSERT_EQ(row.size(), header.size()) << csv;
      for (size_t f = 0; f < header.size(); ++f) {
        const std::map<std::string, std::string> want = {
            {"blocks_moved", "3"}, {"bytes_moved", "12345"}, {"refs_per_second", "20"}};
        auto it = want.find(header[f]);
        if (it != want.end()) {
          EXPECT_EQ(row[f], it->second) << header[f] << " in " << csv;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::replay
