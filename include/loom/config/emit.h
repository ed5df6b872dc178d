#pragma once

// Writing a job back as YAML: every key of the schema, defaults included, in ai-toolkit's key
// paths. Loading the result gives a Job equal to the one emitted.

#include <string>

#include "loom/config/job.h"

namespace loom::config {

std::string emit_job_yaml(const Job& job);

}  // namespace loom::config
