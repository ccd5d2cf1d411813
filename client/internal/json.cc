#include "client/internal/json.h"

#include <cctype>
#include <cstdio>

namespace kvtier::client::internal {
namespace {

size_t SkipDigits(std::string_view s, size_t i) {
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0) ++i;
  return i;
}

// RFC 8259's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
bool IsJsonNumber(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size()) return false;
  if (s[i] == '0') {
    ++i;
  } else {
    const size_t j = SkipDigits(s, i);
    if (j == i) return false;
    i = j;
  }
  if (i < s.size() && s[i] == '.') {
    const size_t j = SkipDigits(s, i + 1);
    if (j == i + 1) return false;
    i = j;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    const size_t j = SkipDigits(s, i);
    if (j == i) return false;
    i = j;
  }
  return i == s.size();
}

}  // namespace

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string JsonValue(std::string_view s) {
  return IsJsonNumber(s) ? std::string(s) : JsonString(s);
}

std::string StatsJson(const std::vector<std::pair<std::string, std::string>>& entries,
                      bool pretty) {
  std::string out = "{";
  for (size_t i = 0; i < entries.size(); ++i) {
    out += i == 0 ? "" : ",";
    if (pretty) out += "\n  ";
    out += JsonString(entries[i].first) + (pretty ? ": " : ":") + JsonValue(entries[i].second);
  }
  out += pretty && !entries.empty() ? "\n}" : "}";
  return out;
}

}  // namespace kvtier::client::internal
