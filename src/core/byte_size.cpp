#include "loom/core/byte_size.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "loom/core/error.h"

namespace loom {

namespace {

struct Unit {
    const char* name;  // lower-case
    std::uint64_t factor;
};

constexpr std::array<Unit, 10> kUnits{{
    {"", 1},
    {"b", 1},
    {"kib", kKiB},
    {"mib", kMiB},
    {"gib", kGiB},
    {"tib", kTiB},
    {"kb", 1000ULL},
    {"mb", 1000ULL * 1000ULL},
    {"gb", 1000ULL * 1000ULL * 1000ULL},
    {"tb", 1000ULL * 1000ULL * 1000ULL * 1000ULL},
}};

[[noreturn]] void fail(std::string_view text, const std::string& why) {
    throw Error("invalid size '" + std::string(text) + "': " + why +
                " (write a number with an optional unit: 100000000, 96MiB, 8GiB, 1.5GB)");
}

}  // namespace

std::uint64_t parse_byte_size(std::string_view text) {
    std::size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const std::size_t number_begin = i;
    bool seen_digit = false;
    bool seen_dot = false;
    while (i < text.size()) {
        const char c = text[i];
        if (std::isdigit(static_cast<unsigned char>(c))) {
            seen_digit = true;
        } else if (c == '.' && !seen_dot) {
            seen_dot = true;
        } else {
            break;
        }
        ++i;
    }
    if (!seen_digit) {
        if (number_begin < text.size() && text[number_begin] == '-') fail(text, "it is negative");
        fail(text, "it does not start with a number");
    }
    const std::string number(text.substr(number_begin, i - number_begin));
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    std::string unit;
    for (; i < text.size(); ++i) {
        const char c = text[i];
        if (std::isspace(static_cast<unsigned char>(c))) break;
        unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i != text.size()) fail(text, "unexpected text after the unit");

    const Unit* found = nullptr;
    for (const Unit& u : kUnits) {
        if (unit == u.name) found = &u;
    }
    if (found == nullptr) fail(text, "unknown unit '" + unit + "'");

    if (!seen_dot) {
        std::uint64_t value = 0;
        for (char c : number) {
            const std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
            if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) {
                fail(text, "it is too large");
            }
            value = value * 10 + digit;
        }
        if (value != 0 && found->factor > std::numeric_limits<std::uint64_t>::max() / value) {
            fail(text, "it is too large");
        }
        return value * found->factor;
    }
    const long double value = std::strtold(number.c_str(), nullptr);
    const long double bytes = std::floor(value * static_cast<long double>(found->factor));
    if (bytes >= static_cast<long double>(std::numeric_limits<std::uint64_t>::max())) {
        fail(text, "it is too large");
    }
    return static_cast<std::uint64_t>(bytes);
}

std::string format_byte_size(std::uint64_t bytes) {
    if (bytes == 0) return "0";
    static constexpr std::array<Unit, 4> kBinary{
        {{"TiB", kTiB}, {"GiB", kGiB}, {"MiB", kMiB}, {"KiB", kKiB}}};
    for (const Unit& u : kBinary) {
        if (bytes % u.factor == 0) return std::to_string(bytes / u.factor) + u.name;
    }
    return std::to_string(bytes);
}

std::string format_bytes_human(std::uint64_t bytes) {
    static constexpr std::array<Unit, 4> kBinary{
        {{"TiB", kTiB}, {"GiB", kGiB}, {"MiB", kMiB}, {"KiB", kKiB}}};
    char buf[64];
    for (const Unit& u : kBinary) {
        if (bytes >= u.factor) {
            std::snprintf(buf, sizeof(buf), "%.2f %s",
                          static_cast<double>(bytes) / static_cast<double>(u.factor), u.name);
            return buf;
        }
    }
    std::snprintf(buf, sizeof(buf), "%llu bytes", static_cast<unsigned long long>(bytes));
    return buf;
}

}  // namespace loom
