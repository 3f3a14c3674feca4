// Number options read as a person writes them: integers in decimal only (CLI11 alone reads "010"
// as octal 8 and "0x10" as 16), seconds finite ("nan" and "inf" are not durations).
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <string>

namespace fp8audit::cli {

// A transform for unsigned integer options: decimal digits, leading zeros dropped ("010" is 10).
inline CLI::Validator Decimal() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) {
          return "not a whole number in decimal: " + value;
        }
        const size_t first = value.find_first_not_of('0');
        value = first == std::string::npos ? "0" : value.substr(first);
        return "";
      },
      "", "decimal");
}

// A check for seconds: a finite number.
inline CLI::Validator FiniteNumber() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end != '\0' || !std::isfinite(v)) {
          return "not a finite number: " + value;
        }
        return "";
      },
      "", "finite");
}

}  // namespace fp8audit::cli
