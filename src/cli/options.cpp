#include "options.h"

#include "loom/core/error.h"

namespace loom::cli {

cxxopts::ParseResult parse_options(cxxopts::Options& options, const std::string& name,
                                   const std::vector<std::string>& args) {
    ArgvBuffer argv("loom " + name, args);
    try {
        return options.parse(argv.argc(), argv.argv());
    } catch (const cxxopts::exceptions::exception& e) {
        throw UsageError("loom " + name + ": " + e.what() + " (see `loom help " + name + "`)");
    }
}

void add_job_options(cxxopts::Options& options) {
    options.add_options("job")("set",
                               "Override a job key after ${ENV} and [name] substitution, e.g. "
                               "--set config.process.0.train.lr=1e-4 (repeatable; default: none)",
                               cxxopts::value<std::vector<std::string>>(), "PATH=VALUE")(
        "strict", "Treat every warning (unknown or unsupported keys) as an error (default: off)");
}

}  // namespace loom::cli
