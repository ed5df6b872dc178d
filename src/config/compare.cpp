#include "field_traits.h"
#include "loom/config/job.h"

namespace loom::config {

bool operator==(const Job& a, const Job& b) {
    return detail::fields_equal(a, b);
}

}  // namespace loom::config
