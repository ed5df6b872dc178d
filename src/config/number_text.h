#pragma once

// Numbers as YAML text, strict both ways: what the reader accepts and what the emitter writes
// (shortest text that parses back to the same double).

#include <optional>
#include <string>
#include <string_view>

namespace loom::config::detail {

// "[+-]digits" only; nullopt for anything else or on overflow.
std::optional<long long> parse_integer_text(std::string_view text);

// Decimal or exponent forms ("1e-4", "0.0001", "5", "-.5"); nullopt for anything else. PyYAML
// only resolves "1.0e-4" as a float, but ai-toolkit patches its loader so "1e-4" is one too.
std::optional<double> parse_float_text(std::string_view text);

// Shortest round-trip text for a double, always recognisable as a float ("1.0", "1e-06").
std::string format_float(double value);

// Text for a rule bound in messages: "64", "0.5".
std::string format_number(double value);

}  // namespace loom::config::detail
