#pragma once

// Typed reading of a parsed job document into loom::config::Job, walking each struct's
// `fields()` list: type checks, rules (field_rules.h), duplicate keys, and warnings for keys the
// schema does not have. Internal to the config layer.

#include <map>
#include <string>
#include <vector>

#include "loom/config/diagnostic.h"
#include "loom/config/job.h"
#include "yaml_source.h"

namespace loom::config::detail {

struct ReadResult {
    Job job;
    std::vector<Diagnostic> warnings;
    // Where each key path was read from ("file:line:col" or "--set ..."), for checks that span
    // several keys (resolve.cpp). Mappings are recorded too, so a missing key can point at its
    // parent.
    std::map<std::string, std::string> locations;
};

ReadResult read_job(const YamlSource& source);

// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace loom::config::detail
