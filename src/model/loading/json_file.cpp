#include "loading/json_file.h"

#include <fstream>
#include <sstream>

#include "loom/core/error.h"

namespace loom {

namespace fs = std::filesystem;

std::string read_file_bytes(const fs::path& path, const std::string& missing_hint) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
        throw IoError(path.string(), fs::exists(path, ec) ? "is not a regular file"
                                     : missing_hint.empty()
                                         ? "does not exist"
                                         : "does not exist (" + missing_hint + ")");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(path.string(), "cannot be opened for reading");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (!in.good() && !in.eof()) throw IoError(path.string(), "could not be read");
    return buffer.str();
}

nlohmann::json parse_json_file(const fs::path& path, const std::string& missing_hint) {
    const std::string bytes = read_file_bytes(path, missing_hint);
    try {
        return nlohmann::json::parse(bytes);
    } catch (const nlohmann::json::parse_error& e) {
        throw FormatError(path.string(), std::string("is not valid JSON: ") + e.what());
    }
}

nlohmann::json read_json(const fs::path& path) {
    nlohmann::json j = parse_json_file(path);
    if (!j.is_object()) throw FormatError(path.string(), "the top level must be a JSON object");
    return j;
}

}  // namespace loom
