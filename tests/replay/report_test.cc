// replay/report.h: the SVG plot tells every policy's line apart.
#include "replay/report.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvtier::replay
