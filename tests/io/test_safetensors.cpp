#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "io_test_util.h"
#include "loom/core/error.h"
#include "loom/io/safetensors.h"

namespace loom {
namespace {

using test::image;
using test::le64;

std::string bytes_of(ByteView view) {
    return std::string(reinterpret_cast<const char*>(view.data), view.size);
}

// The JSON part of a file image, without the 8-byte length and with the padding.
std::string header_of(const std::string& file) {
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(file[i]);
    return file.substr(8, n);
}

std::string format_error(const std::function<void()>& action) {
    try {
        action();
    } catch (const FormatError& e) {
        return e.what();
    }
    return "(no FormatError)";
}

TEST(DType, NamesBitsAndOrderFollowTheReference) {
    const std::vector<std::pair<const char*, int>> expected = {
        {"BOOL", 8},        {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
        {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
        {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16},    {"BF16", 16},
        {"I32", 32},        {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},
        {"I64", 64},        {"U64", 64},
    };
    ASSERT_EQ(kAllDTypes.size(), expected.size());
    for (std::size_t i = 0; i < kAllDTypes.size(); ++i) {
        const DType d = kAllDTypes[i];
        EXPECT_EQ(static_cast<std::size_t>(d), i);
        EXPECT_STREQ(dtype_name(d), expected[i].first);
        EXPECT_EQ(dtype_bits(d), expected[i].second) << expected[i].first;
        EXPECT_EQ(dtype_from_name(expected[i].first), d);
    }
    EXPECT_FALSE(dtype_from_name("f32").has_value());
    EXPECT_FALSE(dtype_from_name("F8_E4M3FN").has_value());
    EXPECT_FALSE(dtype_from_name("").has_value());
}

// Every dtype, plus rank-0 and zero-size tensors, through the writer and back through the reader.
std::vector<TensorToWrite> every_dtype(std::vector<std::string>& storage) {
    std::vector<TensorToWrite> tensors;
    storage.clear();
    storage.reserve(kAllDTypes.size() + 3);
    for (std::size_t k = 0; k < kAllDTypes.size(); ++k) {
        const DType d = kAllDTypes[k];
        const std::uint64_t nbytes = 8u * static_cast<std::uint64_t>(dtype_bits(d)) / 8u;  // [2,4]
        storage.push_back(test::pattern_bytes(k, nbytes, d));
        tensors.push_back(
            {std::string("t.") + dtype_name(d), d, {2, 4}, storage.back().data(), nbytes});
    }
    storage.push_back(test::pattern_bytes(100, 4, DType::kF32));
    tensors.push_back({"scalar", DType::kF32, {}, storage.back().data(), 4});
    tensors.push_back({"empty.bf16", DType::kBF16, {0, 3}, nullptr, 0});
    tensors.push_back({"empty.f4", DType::kF4, {5, 0}, nullptr, 0});
    return tensors;
}

void expect_same_tensors(const SafetensorsFile& file, const std::vector<TensorToWrite>& written) {
    ASSERT_EQ(file.tensors().size(), written.size());
    for (const TensorToWrite& w : written) {
        const TensorInfo* info = file.find(w.name);
        ASSERT_NE(info, nullptr) << w.name;
        EXPECT_EQ(info->dtype, w.dtype) << w.name;
        EXPECT_EQ(info->shape, w.shape) << w.name;
        EXPECT_EQ(info->nbytes(), w.nbytes) << w.name;
        const std::string expected =
            w.nbytes == 0 ? std::string() : std::string(static_cast<const char*>(w.data), w.nbytes);
        EXPECT_EQ(bytes_of(file.data(*info)), expected) << w.name;
    }
}

TEST(Safetensors, RoundTripsEveryDtypeRankZeroAndEmptyTensorsInMemory) {
    std::vector<std::string> storage;
    const std::vector<TensorToWrite> tensors = every_dtype(storage);
    const SafetensorsMetadata metadata = {
        {"format", "pt"}, {"note", "quote \" backslash \\ newline \n tab \t \x01 ü"}};
    const SafetensorsFile file =
        SafetensorsFile::parse(serialize_safetensors(tensors, metadata), "mem.safetensors");
    expect_same_tensors(file, tensors);
    EXPECT_EQ(file.metadata(), metadata);
    ASSERT_NE(file.metadata_value("note"), nullptr);
    EXPECT_EQ(*file.metadata_value("note"), metadata[1].second);
    EXPECT_EQ(file.metadata_value("missing"), nullptr);
    EXPECT_EQ(file.find("scalar")->numel(), 1);
    EXPECT_EQ(file.find("empty.bf16")->numel(), 0);
    EXPECT_EQ(file.find("t.F4")->nbytes(), 4u);       // 8 elements of 4 bits
    EXPECT_EQ(file.find("t.F6_E2M3")->nbytes(), 6u);  // 8 elements of 6 bits
    EXPECT_EQ(file.find("t.C64")->nbytes(), 64u);
    EXPECT_EQ(file.path(), "mem.safetensors");
    EXPECT_FALSE(file.is_memory_mapped());
}

TEST(Safetensors, RoundTripsThroughAMemoryMappedFile) {
    test::TempDir dir;
    std::vector<std::string> storage;
    const std::vector<TensorToWrite> tensors = every_dtype(storage);
    const auto path = dir / "every_dtype.safetensors";
    write_safetensors(path, tensors, {{"ss_network_dim", "4"}});
    EXPECT_EQ(test::list_folder(dir.path()), std::vector<std::string>{"every_dtype.safetensors"});
    EXPECT_EQ(test::read_file(path), serialize_safetensors(tensors, {{"ss_network_dim", "4"}}));

    const SafetensorsFile file = SafetensorsFile::open(path);
    EXPECT_TRUE(file.is_memory_mapped());
    EXPECT_EQ(file.path(), path);
    EXPECT_EQ(file.file_size(), std::filesystem::file_size(path));
    expect_same_tensors(file, tensors);
    ASSERT_EQ(file.metadata().size(), 1u);
    EXPECT_EQ(file.metadata()[0], (std::pair<std::string, std::string>{"ss_network_dim", "4"}));
}

TEST(Safetensors, EmptyFileWithoutTensorsOrMetadata) {
    const std::string file = serialize_safetensors({});
    // ref: safetensors/src/tensor.rs test_empty
    EXPECT_EQ(file, le64(8) + "{}      ");
    const SafetensorsFile parsed = SafetensorsFile::parse(file, "x");
    EXPECT_TRUE(parsed.tensors().empty());
    EXPECT_TRUE(parsed.metadata().empty());
    EXPECT_EQ(parsed.header_size(), 8u);
    EXPECT_EQ(parsed.data_offset(), 16u);
}

// Byte-for-byte the outputs of the reference writer's own tests (safetensors/src/tensor.rs).
TEST(Safetensors, WriterMatchesReferenceBytes) {
    const float values[] = {0.f, 1.f, 2.f, 3.f, 4.f, 5.f};
    std::string data(reinterpret_cast<const char*>(values), sizeof values);

    const std::string expected_json =
        R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    ASSERT_EQ(expected_json.size(), 64u);  // already a multiple of 8: no padding
    EXPECT_EQ(serialize_safetensors({{"attn.0", DType::kF32, {1, 2, 3}, data.data(), 24}}),
              le64(64) + expected_json + data);

    // test_serialization_forced_alignement: a 65-byte JSON gets 7 spaces.
    EXPECT_EQ(serialize_safetensors({{"attn0", DType::kF32, {1, 1, 2, 3}, data.data(), 24}}),
              le64(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
                  std::string(7, ' ') + data);

    // test_empty with metadata.
    EXPECT_EQ(serialize_safetensors({}, {{"framework", "pt"}}),
              le64(40) + R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' '));
}

TEST(Safetensors, HeaderIsPaddedWithSpacesToAMultipleOf8) {
    const std::uint8_t byte = 7;
    for (std::size_t len = 1; len <= 16; ++len) {
        const std::string name(len, 'n');
        const std::string file = serialize_safetensors({{name, DType::kU8, {1}, &byte, 1}});
        const std::string header = header_of(file);
        EXPECT_EQ(header.size() % 8, 0u) << len;
        const std::string json =
            "{\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
        ASSERT_GE(header.size(), json.size());
        EXPECT_LT(header.size() - json.size(), 8u);
        EXPECT_EQ(header, json + std::string(header.size() - json.size(), ' '));
        EXPECT_EQ(file.size(), 8 + header.size() + 1);
        EXPECT_EQ(file.back(), '\x07');
    }
}

TEST(Safetensors, WriterOrdersByDescendingDtypeThenNameAndAlignsEveryTensor) {
    std::vector<std::string> storage;
    std::vector<TensorToWrite> tensors;
    const std::vector<std::pair<std::string, DType>> specs = {
        {"b", DType::kU8},   {"c", DType::kF32}, {"a", DType::kF32},
        {"d", DType::kBF16}, {"e", DType::kF64}, {"f", DType::kF4}};
    storage.reserve(specs.size());
    for (std::size_t k = 0; k < specs.size(); ++k) {
        const DType d = specs[k].second;
        const std::uint64_t nbytes = 6u * static_cast<std::uint64_t>(dtype_bits(d)) / 8u;
        storage.push_back(test::pattern_bytes(k, nbytes, d));
        tensors.push_back({specs[k].first, d, {3, 2}, storage.back().data(), nbytes});
    }
    const SafetensorsFile file = SafetensorsFile::parse(serialize_safetensors(tensors), "x");
    std::vector<std::string> order;
    std::vector<std::uint64_t> begins;
    for (const TensorInfo& t : file.tensors()) {
        order.push_back(t.name);
        begins.push_back(t.begin);
        const std::uint64_t element_bytes = std::max(1, dtype_bits(t.dtype) / 8);
        EXPECT_EQ((file.data_offset() + t.begin) % element_bytes, 0u) << t.name;
    }
    EXPECT_EQ(order, (std::vector<std::string>{"e", "a", "c", "d", "b", "f"}));
    EXPECT_EQ(begins, (std::vector<std::uint64_t>{0, 48, 72, 96, 108, 114}));
    EXPECT_EQ(file.data_offset() % 8, 0u);
    expect_same_tensors(file, tensors);
}

TEST(Safetensors, MetadataComesFirstInTheGivenOrder) {
    const std::uint8_t byte = 1;
    const std::string file =
        serialize_safetensors({{"w", DType::kU8, {1}, &byte, 1}}, {{"z", "1"}, {"a", "2"}});
    EXPECT_EQ(header_of(file).rfind(
                  R"({"__metadata__":{"z":"1","a":"2"},"w":{"dtype":"U8","shape":[1],)", 0),
              0u);
}

TEST(Safetensors, ReaderSortsByOffsetsNotByJsonOrder) {
    const std::string header = R"({"second":{"dtype":"U8","shape":[2],"data_offsets":[1,3]},)"
                               R"("z.empty":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                               R"("first":{"dtype":"U8","shape":[],"data_offsets":[0,1]},)"
                               R"("a.empty":{"dtype":"F32","shape":[4,0],"data_offsets":[0,0]}})";
    const SafetensorsFile file = SafetensorsFile::parse(image(header, "abc"), "x");
    std::vector<std::string> names;
    for (const TensorInfo& t : file.tensors()) names.push_back(t.name);
    EXPECT_EQ(names, (std::vector<std::string>{"a.empty", "z.empty", "first", "second"}));
    EXPECT_EQ(bytes_of(file.data("first")), "a");
    EXPECT_EQ(bytes_of(file.data("second")), "bc");
    EXPECT_EQ(file.data("z.empty").size, 0u);
}

TEST(Safetensors, AcceptsWhatTheReferenceAccepts) {
    // The rustdoc example: N = 60, not a multiple of 8, so the data is unaligned.
    const std::string header = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
    ASSERT_EQ(header.size(), 60u);
    const std::int32_t values[] = {1, -2, 3, 1 << 30};
    const SafetensorsFile file = SafetensorsFile::parse(
        image(header, std::string(reinterpret_cast<const char*>(values), 16)), "x");
    EXPECT_EQ(file.data_offset(), 68u);
    std::int32_t read[4];
    std::memcpy(read, file.data("test").data, sizeof read);
    EXPECT_EQ(read[1], -2);
    EXPECT_EQ(read[3], 1 << 30);

    // Unknown fields in an entry are ignored, whatever they hold.
    const SafetensorsFile extra = SafetensorsFile::parse(
        image(R"({"a":{"offsets_note":{"x":[1,{"y":null}]},"dtype":"U8","shape":[1],)"
              R"("data_offsets":[0,1],"z":-1.5}})",
              "q"),
        "x");
    EXPECT_EQ(extra.find("a")->shape, std::vector<std::int64_t>{1});

    // "__metadata__": null means no metadata; whitespace of any kind may pad the header.
    const SafetensorsFile null_metadata =
        SafetensorsFile::parse(image("{\"__metadata__\":null} \t\r\n"), "x");
    EXPECT_TRUE(null_metadata.metadata().empty());

    // Names are any UTF-8 string, escapes included; "__metadata" is only a name.
    const SafetensorsFile names = SafetensorsFile::parse(
        image(R"({"\u00fc\n":{"dtype":"U8","shape":[],"data_offsets":[0,1]},)"
              R"("__metadata":{"dtype":"U8","shape":[],"data_offsets":[1,2]}})",
              "xy"),
        "x");
    EXPECT_NE(names.find("\xc3\xbc\n"), nullptr);
    EXPECT_NE(names.find("__metadata"), nullptr);
}

TEST(Safetensors, FindAndDataByName) {
    const std::uint8_t bytes[] = {1, 2, 3};
    const SafetensorsFile file = SafetensorsFile::parse(
        serialize_safetensors({{"b", DType::kU8, {2}, bytes, 2}, {"a", DType::kU8, {1}, bytes, 1}}),
        "model.safetensors");
    EXPECT_EQ(file.find("a")->name, "a");
    EXPECT_EQ(file.find("c"), nullptr);
    EXPECT_EQ(file.find(""), nullptr);
    EXPECT_EQ(format_error([&] { file.data("c"); }),
              "model.safetensors: no tensor 'c' in the file");
}

TEST(Safetensors, MovesKeepTheBytesReachable) {
    test::TempDir dir;
    const std::uint8_t bytes[] = {9, 8, 7, 6};
    write_safetensors(dir / "m.safetensors", {{"w", DType::kU8, {4}, bytes, 4}});
    SafetensorsFile a = SafetensorsFile::open(dir / "m.safetensors");
    SafetensorsFile b(std::move(a));
    EXPECT_EQ(bytes_of(b.data("w")), "\x09\x08\x07\x06");
    SafetensorsFile c = SafetensorsFile::parse(image("{}"), "tiny");  // fits std::string's SSO
    c = std::move(b);
    EXPECT_EQ(bytes_of(c.data("w")), "\x09\x08\x07\x06");
    EXPECT_EQ(c.path(), dir / "m.safetensors");

    SafetensorsFile small = SafetensorsFile::parse(image("{}"), "tiny");
    SafetensorsFile moved(std::move(small));
    EXPECT_EQ(moved.file_size(), 10u);
    EXPECT_EQ(moved.header_size(), 2u);
}

TEST(Safetensors, OpenReportsUnreadableFilesAsIoError) {
    test::TempDir dir;
    const auto missing = dir / "missing.safetensors";
    try {
        SafetensorsFile::open(missing);
        FAIL() << "opened a missing file";
    } catch (const IoError& e) {
        EXPECT_EQ(std::string(e.what()),
                  missing.string() + ": cannot open for reading: No such file or directory");
        EXPECT_EQ(e.path(), missing.string());
    }
    try {
        SafetensorsFile::open(dir.path());
        FAIL() << "opened a folder";
    } catch (const IoError& e) {
        EXPECT_EQ(std::string(e.what()),
                  dir.path().string() + ": is a folder, not a safetensors file");
    }
}

TEST(Safetensors, OpenNamesTheFileInFormatErrors) {
    test::TempDir dir;
    const auto path = dir / "empty.safetensors";
    { std::ofstream(path.string()).flush(); }
    EXPECT_EQ(format_error([&] { SafetensorsFile::open(path); }),
              path.string() +
                  ": file is empty; a safetensors file starts with an 8-byte header "
                  "length");
    const auto truncated = dir / "truncated.safetensors";
    const std::string full = serialize_safetensors({{"w", DType::kF32, {1}, "abcd", 4}});
    {
        std::ofstream out(truncated.string(), std::ios::binary);
        out << full.substr(0, full.size() - 1);
    }
    EXPECT_EQ(format_error([&] { SafetensorsFile::open(truncated); }),
              truncated.string() +
                  ": file is truncated: the tensors need 4 bytes of data but 3 follow the header");
}

TEST(SafetensorsWriter, RejectsInvalidTensors) {
    const std::uint8_t data[16] = {};
    using Case = std::pair<std::vector<TensorToWrite>, std::string>;
    const std::vector<Case> cases = {
        {{{"a.weight", DType::kF32, {2, 2}, data, 12}},
         "tensor 'a.weight': data holds 12 bytes but F32 shape [2, 2] needs 16"},
        {{{"a", DType::kU8, {1}, data, 1}, {"a", DType::kU8, {1}, data, 1}},
         "duplicate tensor 'a'"},
        {{{"__metadata__", DType::kU8, {1}, data, 1}},
         "tensor name '__metadata__' is reserved for metadata"},
        {{{"a", DType::kU8, {2, -1}, data, 0}},
         "tensor 'a': shape [2, -1] has a negative dimension"},
        {{{"a", DType::kF4, {3}, data, 1}},
         "tensor 'a': F4 shape [3] is 12 bits, not a whole number of bytes"},
        {{{"a", DType::kU8, {4}, nullptr, 4}}, "tensor 'a': data is null"},
        {{{"bad\xff", DType::kU8, {1}, data, 1}}, "tensor name 'bad\\xff' is not valid UTF-8"},
        {{{"a", DType::kU8, {1LL << 32, 1LL << 32}, data, 0}},
         "tensor 'a': U8 shape [4294967296, 4294967296] is too large: its size overflows 64 bits"},
    };
    for (const auto& [tensors, message] : cases) {
        EXPECT_EQ(format_error([&] { serialize_safetensors(tensors); }), message);
    }
    EXPECT_EQ(format_error([] {
                  serialize_safetensors({}, {{"k", "1"}, {"k", "2"}});
              }),
              "duplicate __metadata__ key 'k'");
    EXPECT_EQ(format_error([] {
                  serialize_safetensors({}, {{"k", "\xc0\xaf"}});
              }),
              "__metadata__ value of 'k' is not valid UTF-8");
}

TEST(SafetensorsWriter, FormatErrorNamesThePathAndWritesNothing) {
    test::TempDir dir;
    const auto path = dir / "lora.safetensors";
    const std::uint8_t data[4] = {};
    EXPECT_EQ(format_error([&] {
                  write_safetensors(path, {{"a", DType::kF32, {2}, data, 4}});
              }),
              path.string() + ": tensor 'a': data holds 4 bytes but F32 shape [2] needs 8");
    EXPECT_TRUE(test::list_folder(dir.path()).empty());
}

TEST(SafetensorsWriter, ReplacesAnExistingFileAtomically) {
    test::TempDir dir;
    const auto path = dir / "lora.safetensors";
    const std::uint8_t one = 1;
    const std::uint8_t two[2] = {2, 2};
    write_safetensors(path, {{"a", DType::kU8, {1}, &one, 1}});
    write_safetensors(path, {{"b", DType::kU8, {2}, two, 2}});
    const SafetensorsFile file = SafetensorsFile::open(path);
    ASSERT_EQ(file.tensors().size(), 1u);
    EXPECT_EQ(file.tensors()[0].name, "b");
    EXPECT_EQ(test::list_folder(dir.path()), std::vector<std::string>{"lora.safetensors"});
}

}  // namespace
}  // namespace loom
