#pragma once

// Rules attached to a job field in its struct's `fields()` list. They carry no YAML and no torch:
// the reader (src/config/reader.cpp) checks them, the emitter and comparer ignore them.

#include <initializer_list>
#include <string>
#include <vector>

namespace loom::config {

// The key must be present. `hint` says what the value is ("a diffusers model folder").
struct Required {
    const char* hint = "";
};

// Numeric bounds, checked on the value (and on every element of a list).
struct AtLeast {
    double min;
};
struct Above {
    double min;
};
struct AtMost {
    double max;
};
struct Below {
    double max;
};
struct MultipleOf {
    long long factor;
};

// A string enumeration: values loom implements, and values ai-toolkit accepts that loom does not
// implement yet (accepted with a "not supported yet" warning). Anything else is an error.
struct OneOf {
    std::vector<std::string> supported;
    std::vector<std::string> not_yet = {};
    const char* not_yet_note = "";
};

// Another key that means the same ("rank" for "linear"). Giving both with different values is an
// error; the emitter writes only the primary key.
struct Alias {
    const char* key;
};

// An ai-toolkit key loom reads but whose non-default values it does not implement yet: any other
// value gets a "not supported yet" warning naming what loom does instead.
struct NotYetUnlessDefault {
    const char* note = "";
};

// ai-toolkit keys loom does not implement that only tune one feature, switched by the section's
// key `feature` (a network's "type", a dataset's "mask_path"): while the feature is off — the key
// absent or off (null, false, empty), or, with `on_value`, any other value — they change nothing,
// so a job that leaves them at whatever ai-toolkit's UI writes is not warned about them.
struct NotYetFeature {
    const char* feature;
    const char* on_value;  // nullptr: on whenever not off
    std::vector<const char*> keys;
};

// An ai-toolkit key loom does not implement, and the values of it that ask for nothing loom does
// not do (ai-toolkit's default): only another value is warned about.
struct NotYetUnlessValue {
    const char* key;
    std::vector<const char*> values;
};

// ai-toolkit keys that never change what is trained or written (its UI's own bookkeeping, such
// as sqlite_db_path): read and ignored without a word.
struct Inert {
    std::vector<const char*> keys;
};

// A list must have at least this many elements.
struct MinItems {
    std::size_t count;
};

}  // namespace loom::config
