#pragma once

// Defaults that depend on other keys (linear_alpha from alpha, a dataset's trigger word from its
// process, model.arch from legacy flags, ...) and checks that span several keys.

#include "reader.h"

namespace loom::config::detail {

void resolve_job(ReadResult& result);

}  // namespace loom::config::detail
