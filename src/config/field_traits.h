#pragma once

// Type traits shared by the visitors that walk the job structs' fields() lists, and the
// field-by-field equality they all rely on. Internal to the config layer.

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/config/job.h"

namespace loom::config::detail {

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};

// A leaf value: compared with ==, read from one YAML scalar (StringMap aside).
template <class T>
inline constexpr bool is_leaf_v = std::is_arithmetic_v<T> || std::is_same_v<T, std::string> ||
                                  std::is_same_v<T, MemorySize> || std::is_same_v<T, StringMap>;

template <class T>
bool fields_equal(const T& a, const T& b);

template <class S>
class StructComparer {
  public:
    StructComparer(const S& a, const S& b) : a_(a), b_(b) {}

    template <class T, class... R>
    void operator()(const char*, T S::*member, const R&...) {
        same_ = same_ && fields_equal(a_.*member, b_.*member);
    }
    void not_yet(std::initializer_list<const char*>) {}
    void not_yet(const NotYetFeature&) {}
    void not_yet(const NotYetUnlessValue&) {}
    void not_yet(const Inert&) {}
    bool same() const { return same_; }

  private:
    const S& a_;
    const S& b_;
    bool same_ = true;
};

template <class T>
bool fields_equal(const T& a, const T& b) {
    if constexpr (is_leaf_v<T>) {
        return a == b;
    } else if constexpr (is_optional<T>::value) {
        if (a.has_value() != b.has_value()) return false;
        return !a.has_value() || fields_equal(*a, *b);
    } else if constexpr (is_vector<T>::value) {
        if (a.size() != b.size()) return false;
        for (std::size_t i = 0; i < a.size(); ++i) {
            if (!fields_equal(a[i], b[i])) return false;
        }
        return true;
    } else {
        StructComparer<T> comparer(a, b);
        T::fields(comparer);
        return comparer.same();
    }
}

}  // namespace loom::config::detail
