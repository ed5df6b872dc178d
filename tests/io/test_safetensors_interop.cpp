// The C++ half of the parity test tests/io/safetensors_interop.py, which creates the folder named
// by LOOM_INTEROP_DIR and runs these tests; without it they skip.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io_test_util.h"
#include "loom/io/atomic_file.h"
#include "loom/io/safetensors.h"
#include "malformed_cases.h"

namespace loom {
namespace {

// Must equal PY_METADATA / CPP_METADATA in safetensors_interop.py.
const SafetensorsMetadata kPythonMetadata = {{"format", "pt \xc3\xbc \"q\" \\ \n\t\x01 end"}};
const SafetensorsMetadata kCppMetadata = {
    {"ss_network_dim", "4"}, {"ss_network_alpha", "4.0"}, {"text", "\xc3\xbc\n\"x\""}};

std::filesystem::path interop_dir() {
    const char* dir = std::getenv("LOOM_INTEROP_DIR");
    return dir == nullptr ? std::filesystem::path() : std::filesystem::path(dir);
}

// Mirrors expected_tensors() in safetensors_interop.py. The reference's Python writer has no F6.
std::vector<TensorToWrite> interop_tensors(bool python_writable,
                                           std::vector<std::string>& storage) {
    storage.clear();
    storage.reserve(kAllDTypes.size() + 1);
    std::vector<TensorToWrite> tensors;
    for (std::size_t k = 0; k < kAllDTypes.size(); ++k) {
        const DType d = kAllDTypes[k];
        if (python_writable && (d == DType::kF6E2M3 || d == DType::kF6E3M2)) continue;
        const std::uint64_t nbytes = 8u * static_cast<std::uint64_t>(dtype_bits(d)) / 8u;
        storage.push_back(test::pattern_bytes(k, nbytes, d));
        tensors.push_back(
            {std::string("t.") + dtype_name(d), d, {2, 4}, storage.back().data(), nbytes});
    }
    storage.push_back(test::pattern_bytes(100, 4, DType::kF32));
    tensors.push_back({"scalar", DType::kF32, {}, storage.back().data(), 4});
    tensors.push_back({"empty.bf16", DType::kBF16, {0, 3}, nullptr, 0});
    return tensors;
}

TEST(Interop, ReadsReferenceWriterOutputAndWritesTheSameBytes) {
    const std::filesystem::path dir = interop_dir();
    if (dir.empty()) GTEST_SKIP() << "run by tests/io/safetensors_interop.py (label parity)";
    const auto path = dir / "py_written.safetensors";
    const SafetensorsFile file = SafetensorsFile::open(path);

    std::vector<std::string> storage;
    const std::vector<TensorToWrite> tensors = interop_tensors(true, storage);
    ASSERT_EQ(file.tensors().size(), tensors.size());
    for (const TensorToWrite& t : tensors) {
        const TensorInfo* info = file.find(t.name);
        ASSERT_NE(info, nullptr) << t.name;
        EXPECT_EQ(info->dtype, t.dtype) << t.name;
        EXPECT_EQ(info->shape, t.shape) << t.name;
        const ByteView bytes = file.data(*info);
        const std::string expected =
            t.nbytes == 0 ? std::string() : std::string(static_cast<const char*>(t.data), t.nbytes);
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data), bytes.size), expected)
            << t.name;
    }
    EXPECT_EQ(file.metadata(), kPythonMetadata);
    // Same order, same JSON, same escapes, same padding: byte-identical to the reference writer.
    EXPECT_EQ(test::read_file(path), serialize_safetensors(tensors, kPythonMetadata));
}

TEST(Interop, WritesFilesForTheReferenceReader) {
    const std::filesystem::path dir = interop_dir();
    if (dir.empty()) GTEST_SKIP() << "run by tests/io/safetensors_interop.py (label parity)";
    std::vector<std::string> storage;
    write_safetensors(dir / "cpp_written.safetensors", interop_tensors(false, storage),
                      kCppMetadata);

    const auto folder = dir / "malformed";
    std::filesystem::create_directories(folder);
    std::string manifest;
    for (const test::MalformedCase& c : test::malformed_cases()) {
        write_file_atomic(folder / (c.name + ".safetensors"), c.bytes);
        manifest += c.name + (c.reference_accepts ? " accept\n" : " reject\n");
    }
    write_file_atomic(folder / "manifest.txt", manifest);
}

}  // namespace
}  // namespace loom
