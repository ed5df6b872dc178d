#include "loom/config/emit.h"

#include <yaml-cpp/yaml.h>

#include <type_traits>

#include "field_traits.h"
#include "loom/core/byte_size.h"
#include "number_text.h"

namespace loom::config {

namespace {

using detail::is_optional;
using detail::is_vector;

// Text that a YAML reader would take for something other than a string is double-quoted, so a
// trigger word "true" or a version "1.0" stays a string for every consumer of the output.
bool needs_quotes(const std::string& s) {
    if (s.empty()) return true;
    if (detail::parse_float_text(s)) return true;
    static const char* const kSpecial[] = {"true", "false", "yes",  "no",    "on",   "off",
                                           "null", "~",     "True", "False", "Yes",  "No",
                                           "On",   "Off",   "Null", "NULL",  "TRUE", "FALSE"};
    for (const char* w : kSpecial) {
        if (s == w) return true;
    }
    return false;
}

template <class S>
class StructEmitter;

template <class T>
void emit_value(YAML::Emitter& out, const T& value) {
    if constexpr (std::is_same_v<T, StringMap>) {
        if (value.empty()) {
            out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
            return;
        }
        out << YAML::BeginMap;
        for (const auto& [k, v] : value) {
            out << YAML::Key << k << YAML::Value;
            emit_value(out, v);
        }
        out << YAML::EndMap;
    } else if constexpr (is_optional<T>::value) {
        if (value) {
            emit_value(out, *value);
        } else {
            out << YAML::Null;
        }
    } else if constexpr (is_vector<T>::value) {
        using E = typename T::value_type;
        const bool flow = value.empty() || std::is_arithmetic_v<E>;
        if (flow) out << YAML::Flow;
        out << YAML::BeginSeq;
        for (const E& e : value) emit_value(out, e);
        out << YAML::EndSeq;
    } else if constexpr (std::is_same_v<T, bool>) {
        out << (value ? "true" : "false");
    } else if constexpr (std::is_integral_v<T>) {
        out << std::to_string(value);
    } else if constexpr (std::is_floating_point_v<T>) {
        out << detail::format_float(value);
    } else if constexpr (std::is_same_v<T, std::string>) {
        if (needs_quotes(value)) out << YAML::DoubleQuoted;
        out << value;
    } else if constexpr (std::is_same_v<T, MemorySize>) {
        out << format_byte_size(value.bytes);
    } else {
        out << YAML::BeginMap;
        StructEmitter<T> emitter(out, value);
        T::fields(emitter);
        out << YAML::EndMap;
    }
}

template <class S>
class StructEmitter {
  public:
    StructEmitter(YAML::Emitter& out, const S& obj) : out_(out), obj_(obj) {}

    template <class T, class... R>
    void operator()(const char* key, T S::*member, const R&...) {
        out_ << YAML::Key << key << YAML::Value;
        emit_value(out_, obj_.*member);
    }
    void not_yet(std::initializer_list<const char*>) {}
    void not_yet(const NotYetFeature&) {}
    void not_yet(const NotYetUnlessValue&) {}
    void not_yet(const Inert&) {}

  private:
    YAML::Emitter& out_;
    const S& obj_;
};

}  // namespace

std::string emit_job_yaml(const Job& job) {
    YAML::Emitter out;
    out.SetIndent(2);
    emit_value(out, job);
    std::string text = out.c_str();
    text += "\n";
    return text;
}

}  // namespace loom::config
