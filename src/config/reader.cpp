#include "reader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <type_traits>

#include "field_traits.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "number_text.h"

namespace loom::config::detail {

namespace {

// The first rule of type X in a rule pack, or nullptr.
template <class X, class... R>
const X* find_rule(const R&... rules) {
    const X* found = nullptr;
    auto pick = [&found](const auto& rule) {
        if constexpr (std::is_same_v<std::decay_t<decltype(rule)>, X>) {
            if (found == nullptr) found = &rule;
        }
    };
    (pick(rules), ...);
    (void)pick;  // an empty rule pack never calls it
    return found;
}

class Context {
  public:
    Context(const YamlSource& source, ReadResult& result) : source_(source), result_(result) {}

    [[noreturn]] void fail(const YAML::Node& node, const std::string& path,
                           const std::string& message) const {
        throw ConfigError(source_.where(node, path), path, message);
    }

    void warn(DiagnosticKind kind, const YAML::Node& node, const std::string& path,
              std::string message) {
        result_.warnings.push_back({kind, source_.where(node, path), path, std::move(message)});
    }

    void record(const YAML::Node& node, const std::string& path) {
        result_.locations[path] = source_.where(node, path);
    }

  private:
    const YamlSource& source_;
    ReadResult& result_;
};

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
    std::string best;
    std::size_t best_distance = std::numeric_limits<std::size_t>::max();
    for (const std::string& c : candidates) {
        const std::size_t d = edit_distance(word, c);
        if (d < best_distance) {
            best_distance = d;
            best = c;
        }
    }
    const std::size_t allowed = std::max<std::size_t>(2, word.size() / 4);
    return best_distance <= allowed ? best : std::string();
}

std::string join_words(const std::vector<std::string>& words) {
    std::string out;
    for (std::size_t i = 0; i < words.size(); ++i) {
        if (i > 0) out += ", ";
        out += words[i];
    }
    return out;
}

bool contains(const std::vector<std::string>& list, const std::string& value) {
    return std::find(list.begin(), list.end(), value) != list.end();
}

// ---- numeric rules ---------------------------------------------------------------------------

template <class N>
void check_rule(Context& ctx, const YAML::Node& node, const std::string& path, N value,
                const AtLeast& rule) {
    if (static_cast<double>(value) < rule.min) {
        ctx.fail(node, path,
                 path + " must be >= " + format_number(rule.min) + ", got " + node.Scalar());
    }
}
template <class N>
void check_rule(Context& ctx, const YAML::Node& node, const std::string& path, N value,
                const Above& rule) {
    if (!(static_cast<double>(value) > rule.min)) {
        ctx.fail(node, path,
                 path + " must be > " + format_number(rule.min) + ", got " + node.Scalar());
    }
}
template <class N>
void check_rule(Context& ctx, const YAML::Node& node, const std::string& path, N value,
                const AtMost& rule) {
    if (static_cast<double>(value) > rule.max) {
        ctx.fail(node, path,
                 path + " must be <= " + format_number(rule.max) + ", got " + node.Scalar());
    }
}
template <class N>
void check_rule(Context& ctx, const YAML::Node& node, const std::string& path, N value,
                const Below& rule) {
    if (!(static_cast<double>(value) < rule.max)) {
        ctx.fail(node, path,
                 path + " must be < " + format_number(rule.max) + ", got " + node.Scalar());
    }
}
template <class N>
void check_rule(Context& ctx, const YAML::Node& node, const std::string& path, N value,
                const MultipleOf& rule) {
    if constexpr (std::is_integral_v<N>) {
        if (value % rule.factor != 0) {
            ctx.fail(node, path,
                     path + " must be a multiple of " + std::to_string(rule.factor) + ", got " +
                         node.Scalar());
        }
    }
}
template <class N, class Rule>
void check_rule(Context&, const YAML::Node&, const std::string&, N, const Rule&) {}

// ---- scalars ---------------------------------------------------------------------------------

void require_scalar(Context& ctx, const YAML::Node& node, const std::string& path,
                    const char* what) {
    if (!node.IsScalar()) {
        ctx.fail(node, path, path + " must be " + what + ", got " + describe(node));
    }
}

bool read_bool(Context& ctx, const YAML::Node& node, const std::string& path) {
    require_scalar(ctx, node, path, "true or false");
    std::string v = node.Scalar();
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    if (v == "true" || v == "yes" || v == "on") return true;
    if (v == "false" || v == "no" || v == "off") return false;
    ctx.fail(node, path, path + " must be true or false, got '" + node.Scalar() + "'");
}

template <class I>
I read_integer(Context& ctx, const YAML::Node& node, const std::string& path) {
    require_scalar(ctx, node, path, "a whole number");
    const std::string& text = node.Scalar();
    const std::optional<long long> value = parse_integer_text(text);
    if (!value) {
        const bool numeric = parse_float_text(text).has_value();
        ctx.fail(node, path,
                 path + " must be a whole number, got '" + text + "'" +
                     (numeric ? " (a fraction or exponent is not allowed here)" : ""));
    }
    if (*value < static_cast<long long>(std::numeric_limits<I>::min()) ||
        *value > static_cast<long long>(std::numeric_limits<I>::max())) {
        ctx.fail(node, path, path + " is out of range, got " + text);
    }
    return static_cast<I>(*value);
}

double read_double(Context& ctx, const YAML::Node& node, const std::string& path) {
    require_scalar(ctx, node, path, "a number");
    const std::optional<double> value = parse_float_text(node.Scalar());
    if (!value) ctx.fail(node, path, path + " must be a number, got '" + node.Scalar() + "'");
    if (!std::isfinite(*value)) {
        ctx.fail(node, path, path + " must be a finite number, got '" + node.Scalar() + "'");
    }
    return *value;
}

nlohmann::json to_json(const YAML::Node& node) {
    if (node.IsMap()) {
        nlohmann::json obj = nlohmann::json::object();
        for (auto it = node.begin(); it != node.end(); ++it) {
            obj[it->first.Scalar()] = to_json(it->second);
        }
        return obj;
    }
    if (node.IsSequence()) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& item : node) arr.push_back(to_json(item));
        return arr;
    }
    if (node.IsScalar()) return node.Scalar();
    return nullptr;
}

// ---- typed values ----------------------------------------------------------------------------

template <class S>
class StructReader;

template <class T, class... R>
void read_value(Context& ctx, const YAML::Node& node, const std::string& path, T& out,
                const R&... rules) {
    if constexpr (std::is_same_v<T, StringMap>) {
        out.clear();
        if (node.IsNull()) return;
        if (!node.IsMap()) ctx.fail(node, path, path + " must be a mapping, got " + describe(node));
        for (auto it = node.begin(); it != node.end(); ++it) {
            const std::string key = it->first.Scalar();
            for (const auto& [existing, _] : out) {
                if (existing == key) {
                    ctx.fail(it->first, join_path(path, key),
                             "duplicate key " + join_path(path, key) + "; keep one");
                }
            }
            const YAML::Node& v = it->second;
            std::string text;
            if (v.IsScalar()) {
                text = v.Scalar();
            } else if (!v.IsNull()) {
                text = to_json(v).dump();
            }
            out.emplace_back(key, text);
        }
    } else if constexpr (is_optional<T>::value) {
        if (node.IsNull()) {
            out.reset();
            return;
        }
        typename T::value_type value{};
        read_value(ctx, node, path, value, rules...);
        out = std::move(value);
    } else if constexpr (is_vector<T>::value) {
        using E = typename T::value_type;
        out.clear();
        if (node.IsSequence()) {
            for (std::size_t i = 0; i < node.size(); ++i) {
                E element{};
                read_value(ctx, node[i], join_path(path, std::to_string(i)), element, rules...);
                out.push_back(std::move(element));
            }
        } else if (node.IsScalar() && (!std::is_class_v<E> || std::is_same_v<E, std::string>)) {
            E element{};
            read_value(ctx, node, path, element, rules...);  // `resolution: 512` is [512]
            out.push_back(std::move(element));
        } else if (!node.IsNull()) {
            ctx.fail(node, path, path + " must be a list, got " + describe(node));
        }
        if (const MinItems* min = find_rule<MinItems>(rules...)) {
            if (out.size() < min->count) {
                ctx.fail(node, path,
                         path + " must have at least " + std::to_string(min->count) +
                             (min->count == 1 ? " item" : " items") + ", got " +
                             std::to_string(out.size()));
            }
        }
    } else if constexpr (std::is_same_v<T, bool>) {
        out = read_bool(ctx, node, path);
    } else if constexpr (std::is_integral_v<T>) {
        out = read_integer<T>(ctx, node, path);
        (check_rule(ctx, node, path, out, rules), ...);
    } else if constexpr (std::is_floating_point_v<T>) {
        out = read_double(ctx, node, path);
        (check_rule(ctx, node, path, out, rules), ...);
    } else if constexpr (std::is_same_v<T, std::string>) {
        require_scalar(ctx, node, path, "text");
        out = node.Scalar();
        if (const OneOf* one = find_rule<OneOf>(rules...)) {
            if (contains(one->supported, out)) return;
            if (contains(one->not_yet, out)) {
                std::string msg =
                    path + ": '" + out + "' is an ai-toolkit value that loom does not support yet";
                if (*one->not_yet_note != '\0') msg += "; " + std::string(one->not_yet_note);
                ctx.warn(DiagnosticKind::kNotSupportedYet, node, path, msg);
                return;
            }
            std::vector<std::string> all = one->supported;
            all.insert(all.end(), one->not_yet.begin(), one->not_yet.end());
            const std::string suggestion = closest_match(out, all);
            ctx.fail(node, path,
                     path + " must be one of " + join_words(one->supported) + ", got '" + out +
                         "'" + (suggestion.empty() ? "" : " (did you mean '" + suggestion + "'?)"));
        }
    } else if constexpr (std::is_same_v<T, MemorySize>) {
        require_scalar(ctx, node, path, "a size such as 8GiB");
        try {
            out.bytes = parse_byte_size(node.Scalar());
        } catch (const Error& e) {
            ctx.fail(node, path, path + ": " + e.what());
        }
    } else {
        StructReader<T> reader(ctx, node, path, out);
        T::fields(reader);
        reader.finish();
    }
}

// Reads one mapping into a struct, key by key, as its fields() list walks it.
template <class S>
class StructReader {
  public:
    StructReader(Context& ctx, const YAML::Node& node, std::string path, S& obj)
        : ctx_(ctx), node_(node), path_(std::move(path)), obj_(obj) {
        if (node.IsNull()) return;  // an empty section: every default applies
        if (!node.IsMap()) {
            ctx.fail(node, path_, path_ + " must be a mapping of keys, got " + describe(node));
        }
        ctx.record(node, path_);
        for (auto it = node.begin(); it != node.end(); ++it) {
            const YAML::Node& key_node = it->first;
            if (!key_node.IsScalar()) {
                ctx.fail(key_node, path_,
                         "keys in " + (path_.empty() ? std::string("the document") : path_) +
                             " must be plain names, got " + describe(key_node));
            }
            const std::string key = key_node.Scalar();
            for (const Entry& e : entries_) {
                if (e.key == key) {
                    ctx.fail(key_node, join_path(path_, key),
                             "duplicate key " + join_path(path_, key) + " (first set on line " +
                                 std::to_string(e.key_node.Mark().line + 1) +
                                 "); ai-toolkit would silently keep the last one, keep one");
                }
            }
            entries_.push_back({key, key_node, it->second, false});
        }
    }

    template <class T, class... R>
    void operator()(const char* key, T S::*member, const R&... rules) {
        known_.emplace_back(key);
        const std::string path = join_path(path_, key);
        Entry* entry = take(key);
        if (const Alias* alias = find_rule<Alias>(rules...)) {
            known_.emplace_back(alias->key);
            Entry* other = take(alias->key);
            if (other != nullptr && entry != nullptr) {
                T a{};
                T b{};
                read_value(ctx_, entry->value, path, a, rules...);
                const std::string other_path = join_path(path_, alias->key);
                read_value(ctx_, other->value, other_path, b, rules...);
                if (!fields_equal(a, b)) {
                    ctx_.fail(other->key_node, other_path,
                              other_path + " and " + path +
                                  " are the same setting with different "
                                  "values (" +
                                  other->value.Scalar() + " and " + entry->value.Scalar() +
                                  "); keep one");
                }
            } else if (other != nullptr) {
                entry = other;
            }
        }
        const Required* required = find_rule<Required>(rules...);
        if (entry == nullptr || (required != nullptr && entry->value.IsNull())) {
            if (required != nullptr) {
                ctx_.fail(entry != nullptr ? entry->key_node : node_, path,
                          "missing required key " + path + " (" + required->hint + ")");
            }
            return;
        }
        ctx_.record(entry->value.IsNull() ? entry->key_node : entry->value, path);
        const T before = obj_.*member;
        read_value(ctx_, entry->value, path, obj_.*member, rules...);
        if (const NotYetUnlessDefault* not_yet = find_rule<NotYetUnlessDefault>(rules...)) {
            if (!fields_equal(obj_.*member, before)) {
                std::string msg =
                    path + ": " + describe(entry->value) + " is not supported by loom yet";
                if (*not_yet->note != '\0') msg += "; " + std::string(not_yet->note);
                ctx_.warn(DiagnosticKind::kNotSupportedYet, entry->value, path, msg);
            }
        }
    }

    void not_yet(std::initializer_list<const char*> keys) {
        for (const char* k : keys) not_yet_.emplace_back(k);
    }
    void not_yet(const NotYetFeature& feature) {
        for (const char* k : feature.keys) not_yet_.emplace_back(k);
        features_.push_back(feature);
    }
    void not_yet(const NotYetUnlessValue& key) {
        not_yet_.emplace_back(key.key);
        unless_values_.push_back(key);
    }
    void not_yet(const Inert& inert) {
        for (const char* k : inert.keys) {
            if (Entry* e = take(k)) ctx_.record(e->key_node, join_path(path_, k));
            known_.emplace_back(k);
        }
    }

    // Warns about every key no field consumed.
    void finish() {
        for (const Entry& e : entries_) {
            if (e.used) continue;
            const std::string path = join_path(path_, e.key);
            if (contains(not_yet_, e.key)) {
                // Off (null, false, empty): what loom does without the setting anyway, as
                // ai-toolkit's UI writes every key of its form (mask_path: null, controls: []).
                // Nor is a key warned about at ai-toolkit's default, or tuning a feature that is
                // off (lokr_factor of a plain LoRA): only what would change training is.
                if (asks_for_nothing(e.value) || at_inert_value(e) || tunes_feature_off(e.key))
                    continue;
                ctx_.warn(DiagnosticKind::kNotSupportedYet, e.key_node, path,
                          path +
                              " is an ai-toolkit setting that loom does not support yet; it "
                              "is ignored");
                continue;
            }
            std::vector<std::string> candidates = known_;
            candidates.insert(candidates.end(), not_yet_.begin(), not_yet_.end());
            const std::string suggestion = closest_match(e.key, candidates);
            ctx_.warn(DiagnosticKind::kUnknownKey, e.key_node, path,
                      "unknown key " + path +
                          (suggestion.empty() ? "" : " (did you mean '" + suggestion + "'?)") +
                          "; it is ignored");
        }
    }

  private:
    static bool asks_for_nothing(const YAML::Node& value) {
        if (!value || value.IsNull()) return true;
        if (value.IsSequence() || value.IsMap()) return value.size() == 0;
        const std::string text = value.Scalar();
        return text.empty() || text == "false" || text == "False" || text == "FALSE";
    }

    struct Entry {
        std::string key;
        YAML::Node key_node;
        YAML::Node value;
        bool used;
    };

    bool at_inert_value(const Entry& e) const {
        if (!e.value.IsScalar()) return false;
        for (const NotYetUnlessValue& k : unless_values_) {
            if (e.key != k.key) continue;
            for (const char* v : k.values) {
                if (e.value.Scalar() == v) return true;
            }
        }
        return false;
    }

    bool tunes_feature_off(const std::string& key) const {
        for (const NotYetFeature& f : features_) {
            if (std::find(f.keys.begin(), f.keys.end(), key) == f.keys.end()) continue;
            const Entry* switch_entry = nullptr;
            for (const Entry& e : entries_) {
                if (e.key == f.feature) switch_entry = &e;
            }
            if (switch_entry == nullptr || asks_for_nothing(switch_entry->value)) return true;
            return f.on_value != nullptr &&
                   !(switch_entry->value.IsScalar() && switch_entry->value.Scalar() == f.on_value);
        }
        return false;
    }

    Entry* take(const std::string& key) {
        for (Entry& e : entries_) {
            if (e.key == key) {
                e.used = true;
                return &e;
            }
        }
        return nullptr;
    }

    Context& ctx_;
    YAML::Node node_;
    std::string path_;
    S& obj_;
    std::vector<Entry> entries_;
    std::vector<std::string> known_;
    std::vector<std::string> not_yet_;
    std::vector<NotYetFeature> features_;
    std::vector<NotYetUnlessValue> unless_values_;
};

}  // namespace

std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> prev(b.size() + 1);
    std::vector<std::size_t> cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t substitution = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitution});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

ReadResult read_job(const YamlSource& source) {
    ReadResult result;
    Context ctx(source, result);
    read_value(ctx, source.root(), "", result.job);
    return result;
}

}  // namespace loom::config::detail
