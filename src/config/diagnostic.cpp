#include "loom/config/diagnostic.h"

namespace loom::config {

std::string Diagnostic::to_string() const {
    return (where.empty() ? std::string() : where + ": ") + "warning: " + message;
}

}  // namespace loom::config
