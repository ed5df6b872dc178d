// libFuzzer target for the safetensors reader (fuzz/README.md). Every input must either parse or
// throw FormatError; anything else (a crash, a sanitizer report, another exception) is a bug.
// Inputs that parse are also written back and re-read, which must give the same tensors.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/io/safetensors.h"

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

std::string bytes_of(const loom::SafetensorsFile& file, const loom::TensorInfo& t) {
    const loom::ByteView view = file.data(t);
    return std::string(reinterpret_cast<const char*>(view.data), view.size);
}

void round_trip(const loom::SafetensorsFile& file) {
    std::vector<loom::TensorToWrite> tensors;
    for (const loom::TensorInfo& t : file.tensors()) {
        tensors.push_back({t.name, t.dtype, t.shape, file.data(t).data, t.nbytes()});
    }
    const loom::SafetensorsFile again = loom::SafetensorsFile::parse(
        loom::serialize_safetensors(tensors, file.metadata()), "round trip");
    check(again.metadata() == file.metadata());
    check(again.tensors().size() == file.tensors().size());
    check(again.data_offset() % 8 == 0);
    for (const loom::TensorInfo& t : file.tensors()) {
        const loom::TensorInfo* u = again.find(t.name);
        check(u != nullptr && file.find(t.name) == &t);
        check(u->dtype == t.dtype && u->shape == t.shape && u->nbytes() == t.nbytes());
        check(bytes_of(again, *u) == bytes_of(file, t));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const loom::SafetensorsFile file = loom::SafetensorsFile::parse(
            std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
        check(file.data_offset() + (file.tensors().empty() ? 0 : file.tensors().back().end) ==
              size);
        round_trip(file);
    } catch (const loom::FormatError& e) {
        // Expected for malformed input; the message must name the file.
        check(std::string(e.what()).rfind("fuzz.safetensors: ", 0) == 0);
    }
    return 0;
}
