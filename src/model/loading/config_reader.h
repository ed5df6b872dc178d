#pragma once

// Reading a component's config.json (and model_index.json) with checks that name the file and the
// key: each model's read_X_config (unet_2d_condition.h, flux_transformer.h, ...) is written on
// this, so every unsupported option is a FormatError naming its key, never silently dropped.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "loading/json_file.h"
#include "loom/core/error.h"

namespace loom {

// Reads config values with type checks that name the file and key.
class ConfigReader {
  public:
    explicit ConfigReader(const std::filesystem::path& path) : path_(path), j_(read_json(path)) {}

    // The object under `key` (transformers' nested "text_config"), read with the same checks;
    // its errors name the key as "text_config.hidden_size". An absent key reads as empty.
    ConfigReader section(const char* key) const {
        if (has(key) && !j_[key].is_object()) fail(key, "must be an object");
        return ConfigReader(path_, has(key) ? j_[key] : nlohmann::json::object(),
                            prefix_ + key + ".");
    }

    const nlohmann::json& raw() const { return j_; }
    bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

    int64_t integer(const char* key, int64_t fallback) const {
        if (!has(key)) return fallback;
        if (!j_[key].is_number_integer()) fail(key, "must be an integer");
        return j_[key].get<int64_t>();
    }
    double number(const char* key, double fallback) const {
        if (!has(key)) return fallback;
        if (!j_[key].is_number()) fail(key, "must be a number");
        return j_[key].get<double>();
    }
    bool boolean(const char* key, bool fallback) const {
        if (!has(key)) return fallback;
        if (!j_[key].is_boolean()) fail(key, "must be true or false");
        return j_[key].get<bool>();
    }
    std::string text(const char* key, const std::string& fallback) const {
        if (!has(key)) return fallback;
        if (!j_[key].is_string()) fail(key, "must be a string");
        return j_[key].get<std::string>();
    }
    std::vector<std::string> texts(const char* key, std::vector<std::string> fallback) const {
        return list<std::string>(key, std::move(fallback), "a list of strings",
                                 [](const nlohmann::json& e) { return e.is_string(); });
    }
    // A list whose entries all pass `valid`, else "must be <what>"; `fallback` when absent.
    template <class T, class Valid>
    std::vector<T> list(const char* key, std::vector<T> fallback, const std::string& what,
                        Valid valid) const {
        if (!has(key)) return fallback;
        const nlohmann::json& v = j_[key];
        if (!v.is_array()) fail(key, "must be " + what);
        std::vector<T> out;
        for (const nlohmann::json& e : v) {
            if (!valid(e)) fail(key, "must be " + what);
            out.push_back(e.get<T>());
        }
        return out;
    }
    // An int (repeated `n` times) or a list of `n` ints.
    std::vector<int64_t> per_block(const char* key, std::size_t n, int64_t fallback) const {
        if (!has(key)) return std::vector<int64_t>(n, fallback);
        const nlohmann::json& v = j_[key];
        if (v.is_number_integer()) return std::vector<int64_t>(n, v.get<int64_t>());
        if (!v.is_array() || v.size() != n) {
            fail(key, "must be an integer or a list of " + std::to_string(n) + " integers");
        }
        std::vector<int64_t> out;
        for (const nlohmann::json& e : v) {
            if (!e.is_number_integer()) fail(key, "must be an integer or a list of integers");
            out.push_back(e.get<int64_t>());
        }
        return out;
    }
    // A key loom does not implement: only its default value is accepted.
    template <class T>
    void require_default(const char* key, const T& expected) const {
        if (!has(key)) return;
        bool ok = false;
        try {
            ok = j_[key].get<T>() == expected;
        } catch (const nlohmann::json::exception&) {
            ok = false;
        }
        if (!ok) {
            fail(key, "is " + j_[key].dump() + ", which loom does not support (only " +
                          nlohmann::json(expected).dump() + ")");
        }
    }
    void require_null(const char* key) const {
        if (has(key))
            fail(key, "is " + j_[key].dump() + ", which loom does not support (only null)");
    }

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw FormatError(path_.string(), "'" + prefix_ + key + "' " + what);
    }

  private:
    ConfigReader(std::filesystem::path path, nlohmann::json j, std::string prefix)
        : path_(std::move(path)), j_(std::move(j)), prefix_(std::move(prefix)) {}

    std::filesystem::path path_;
    nlohmann::json j_;
    std::string prefix_;  // of a section: "text_config."
};

}  // namespace loom
