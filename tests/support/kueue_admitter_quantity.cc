// Kubernetes quantities as Kueue reads and writes them (declared in
// kueue_admitter_plan.h).
#include <cctype>
#include <limits>
#include <optional>
#include <utility>

#include "tests/support/kueue_admitter_plan.h"

namespace tfjob::testing::kueue {
namespace {

using u128 = unsigned __int128;
constexpr int64_t kQuantityMax = std::numeric_limits<int64_t>::max();

// k8s.io/apimachinery's quantity suffixes: binary (1024^n) and decimal SI.
constexpr const char* kBinary[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
constexpr std::pair<const char*, int> kDecimal[] = {{"n", -9}, {"u", -6}, {"m", -3}, {"k", 3}, {"M", 6},
                                                    {"G", 9},  {"T", 12}, {"P", 15}, {"E", 18}};

// The suffix's power of ten and of 1024, or nullopt.
std::optional<std::pair<int, int>> Suffix(std::string_view s) {
  if (s.empty()) return std::make_pair(0, 0);
  for (int i = 0; i < 6; ++i) {
    if (s == kBinary[i]) return std::make_pair(0, i + 1);
  }
  for (const auto& [name, exp] : kDecimal) {
    if (s == name) return std::make_pair(exp, 0);
  }
  if (s.size() < 2 || (s[0] != 'e' && s[0] != 'E')) return std::nullopt;
  size_t i = 1;
  const bool negative = s[i] == '-';
  if (s[i] == '+' || s[i] == '-') ++i;
  if (i >= s.size() || s.size() - i > 3) return std::nullopt;
  int exp = 0;
  for (; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
    exp = exp * 10 + (s[i] - '0');
  }
  return std::make_pair(negative ? -exp : exp, 0);
}

bool IsBinaryResource(std::string_view r) {
  return r == "memory" || r == "ephemeral-storage" || r.substr(0, 10) == "hugepages-";
}

// resource.Quantity.String of a DecimalSI quantity m x 10^exp (exp a
// multiple of 3): the largest exponent that keeps the mantissa whole.
std::string Decimal(int64_t m, int exp) {
  if (m == 0) return "0";
  while (m % 1000 == 0 && exp < 18) {
    m /= 1000;
    exp += 3;
  }
  std::string suffix;
  for (const auto& [name, e] : kDecimal) {
    if (e == exp) suffix = name;
  }
  return std::to_string(m) + suffix;
}

}  // namespace

StatusOr<int64_t> ParseQuantity(std::string_view resource, std::string_view text) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("quantity \"" + Elide(text) + "\" of " + std::string(resource) + ": " + why);
  };
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  std::string digits;
  int fraction = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) digits += text[i];
  if (i < text.size() && text[i] == '.') {
    for (++i; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++fraction) {
      digits += text[i];
    }
  }
  if (digits.empty()) return bad("not a number");
  const auto suffix = Suffix(text.substr(i));
  if (!suffix) return bad("unknown suffix \"" + std::string(text.substr(i)) + "\"");
  while (fraction > 0 && digits.back() == '0') digits.pop_back(), --fraction;
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  if (digits.size() > 36) return bad("out of range");
  u128 m = 0;
  for (char c : digits) m = m * 10 + static_cast<unsigned>(c - '0');
  if (negative && m != 0) return bad("negative");
  for (int k = 0; k < suffix->second; ++k) m *= 1024;  // 36 digits x 2^60 < 2^128
  int exp = suffix->first - fraction + (resource == "cpu" ? 3 : 0);
  for (; exp > 0 && m != 0; --exp) {
    if (m > static_cast<u128>(kQuantityMax)) return bad("out of range");
    m *= 10;
  }
  if (exp < 0) {  // rounded up, as Quantity.Value and MilliValue round
    if (exp < -38) {
      m = m != 0 ? 1 : 0;
    } else {
      u128 p = 1;
      for (; exp < 0; ++exp) p *= 10;
      m = m / p + (m % p != 0 ? 1 : 0);
    }
  }
  if (m > static_cast<u128>(kQuantityMax)) return bad("out of range");
  return static_cast<int64_t>(m);
}

StatusOr<int64_t> QuantityOf(std::string_view resource, const json& value) {
  if (value.is_string()) return ParseQuantity(resource, value.get<std::string>());
  if (value.is_number()) return ParseQuantity(resource, value.dump());
  return InvalidArgument("quantity of " + std::string(resource) + " is " + Elide(value.dump()) + ", not a quantity");
}

std::string FormatQuantity(std::string_view resource, int64_t value) {
  if (resource == "cpu") return Decimal(value, -3);
  if (IsBinaryResource(resource) && (value >= 1024 || value <= -1024) && value % 1024 == 0) {
    int k = 0;
    while (value % 1024 == 0 && k < 6) value /= 1024, ++k;
    return std::to_string(value) + kBinary[k - 1];
  }
  return Decimal(value, 0);
}

}  // namespace tfjob::testing::kueue
