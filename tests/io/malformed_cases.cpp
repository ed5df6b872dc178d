#include "malformed_cases.h"

#include <string_view>

#include "io_test_util.h"

namespace loom::test {

namespace {

// One entry `"name":{...}` with the given dtype, shape and offsets JSON.
std::string entry(std::string_view name, std::string_view dtype, std::string_view shape,
                  std::string_view offsets) {
    return "\"" + std::string(name) + "\":{\"dtype\":\"" + std::string(dtype) +
           "\",\"shape\":" + std::string(shape) + ",\"data_offsets\":" + std::string(offsets) + "}";
}

std::string object(std::string_view body) {
    return "{" + std::string(body) + "}";
}

}  // namespace

std::vector<MalformedCase> malformed_cases() {
    const std::string ok_header = object(entry("a", "F32", "[2,2]", "[0,16]"));
    const std::string bytes16(16, '\x01');
    const std::string known_dtypes =
        "BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, "
        "F8_E5M2FNUZ, I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64";
    // Only an unknown field can nest; the reference (serde_json) stops at 128 levels too.
    const std::string deep = std::string(200, '[') + std::string(200, ']');

    std::vector<MalformedCase> cases = {
        // --- the 8-byte length and the header bytes
        {"EmptyFile", "", "file is empty; a safetensors file starts with an 8-byte header length"},
        {"TooSmall", std::string("\x02\x00\x00\x00\x00", 5),
         "file is 5 bytes, too small to hold the 8-byte header length"},
        {"HeaderTooLarge", le64(100'000'001) + "{}",
         "header length 100000001 exceeds the limit of 100000000 bytes"},
        {"HeaderLengthAllOnes", le64(~0ULL) + "{}",
         "header length 18446744073709551615 exceeds the limit of 100000000 bytes"},
        {"HeaderAtLimitPastEof", le64(100'000'000) + "{}",
         "header length 100000000 runs past the end of the file (8 + 100000000 > 10 bytes)"},
        {"HeaderPastEof", le64(100) + "{}" + std::string(10, ' '),
         "header length 100 runs past the end of the file (8 + 100 > 20 bytes)"},
        {"NotUtf8", image("{\"\xff\":1}"),
         "header is not valid UTF-8 (bad byte at file offset 10)"},
        {"OverlongUtf8", image("{\"\xc0\xaf\":1}"),
         "header is not valid UTF-8 (bad byte at file offset 10)"},
        {"EmptyHeader", image(""), "header is empty; it must be a JSON object starting with '{'"},
        {"TopLevelArray", image("[]"), "header must start with '{', found '['"},
        {"LeadingSpace", image(" {}"), "header must start with '{', found ' '", true},
        {"LeadingNewline", image("\n{}"), "header must start with '{', found byte 0x0a", true},
        // --- JSON syntax
        {"NotJson", image("{\"a\":"),
         "header is not valid JSON: parse error at line 1, column 6: syntax error while parsing "
         "value - unexpected end of input; expected '[', '{', or a literal"},
        {"TrailingGarbage", image("{} x"),
         "header is not valid JSON: parse error at line 1, column 4: syntax error while parsing "
         "value - invalid literal; last read: '{} x'; expected end of input"},
        {"NulPadding", image(std::string("{}\0\0", 4)),
         "header is not valid JSON: NUL byte at file offset 10 (pad headers with spaces)"},
        {"NulInsideString", image(std::string("{\"a\0\":1}", 8)),
         "header is not valid JSON: NUL byte at file offset 11 (pad headers with spaces)"},
        {"TrailingComma", image("{\"__metadata__\":{\"k\":\"v\"},}"),
         "header is not valid JSON: parse error at line 1, column 27: syntax error while parsing "
         "object key - unexpected '}'; expected string literal"},
        {"LoneSurrogate", image("{\"\\ud800\":1}"),
         "header is not valid JSON: parse error at line 1, column 9: syntax error while parsing "
         "object key - invalid string: surrogate U+D800..U+DBFF must be followed by "
         "U+DC00..U+DFFF; last read: '\"\\ud800\"'; expected string literal"},
        {"TooDeep",
         image("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":" + deep + "}}",
               "x"),
         "header JSON nests deeper than 128 levels"},
        // --- __metadata__
        {"MetadataNotObject", image("{\"__metadata__\":\"v1\"}"),
         "__metadata__ must be an object of string values, found the string 'v1'"},
        {"MetadataArray", image("{\"__metadata__\":[\"k\",\"v\"]}"),
         "__metadata__ must be an object of string values, found an array"},
        {"MetadataNumberValue", image("{\"__metadata__\":{\"epochs\":3}}"),
         "__metadata__ value of 'epochs' must be a string, found 3"},
        {"MetadataObjectValue", image("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}"),
         "__metadata__ value of 'k' must be a string, found an object"},
        {"MetadataNullValue", image("{\"__metadata__\":{\"k\":null}}"),
         "__metadata__ value of 'k' must be a string, found null"},
        {"DuplicateMetadataKey", image("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"),
         "duplicate __metadata__ key 'k'", true},
        {"DuplicateMetadataBlock", image("{\"__metadata__\":{},\"__metadata__\":{}}"),
         "duplicate key '__metadata__'"},
        // --- tensor entries
        {"DuplicateTensor",
         image(object(entry("a", "U8", "[1]", "[0,1]") + "," + entry("a", "U8", "[1]", "[0,1]")),
               "x"),
         "duplicate tensor 'a'", true},
        {"DuplicateField",
         image("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
               "x"),
         "tensor 'a': duplicate field 'dtype'"},
        {"EntryNotObject", image("{\"a\":[0,1]}"),
         "tensor 'a': entry must be an object with dtype, shape and data_offsets, found an "
         "array"},
        {"UnknownDtype", image(object(entry("a", "f32", "[1]", "[0,4]")), "abcd"),
         "tensor 'a': unknown dtype 'f32' (expected one of " + known_dtypes + ")"},
        {"DtypeNotString", image("{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}"),
         "tensor 'a': dtype must be a string, found 32"},
        {"MissingDtype", image("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", "x"),
         "tensor 'a': missing field 'dtype'"},
        {"MissingShape", image("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", "x"),
         "tensor 'a': missing field 'shape'"},
        {"MissingDataOffsets", image("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", "x"),
         "tensor 'a': missing field 'data_offsets'"},
        {"NegativeShape", image(object(entry("a", "U8", "[2,-1]", "[0,2]")), "xx"),
         "tensor 'a': shape must be an array of non-negative integers, found -1"},
        {"NegativeZeroShape", image(object(entry("a", "U8", "[-0]", "[0,0]"))),
         "tensor 'a': shape must be an array of non-negative integers, found -0"},
        {"FloatShape", image(object(entry("a", "U8", "[2.0]", "[0,2]")), "xx"),
         "tensor 'a': shape must be an array of non-negative integers, found 2.0"},
        {"ShapeNotArray", image(object(entry("a", "U8", "4", "[0,4]")), "xxxx"),
         "tensor 'a': shape must be an array of non-negative integers, found 4"},
        {"ShapeDimBeyondInt64", image(object(entry("a", "U8", "[0,9223372036854775808]", "[0,0]"))),
         "tensor 'a': shape dimension 9223372036854775808 does not fit in int64", true},
        {"FloatOffsets", image(object(entry("a", "U8", "[1]", "[0,1.5]")), "x"),
         "tensor 'a': data_offsets must be non-negative integers, found 1.5"},
        {"StringOffsets", image(object(entry("a", "U8", "[1]", "[\"0\",\"1\"]")), "x"),
         "tensor 'a': data_offsets must be non-negative integers, found the string '0'"},
        {"NegativeOffsets", image(object(entry("a", "U8", "[1]", "[-1,0]")), "x"),
         "tensor 'a': data_offsets must be non-negative integers, found -1"},
        {"OffsetBeyondUint64",
         image(object(entry("a", "U8", "[1]", "[0,18446744073709551616]")), "x"),
         "tensor 'a': data_offsets must be non-negative integers, found 18446744073709551616 (too "
         "large for 64 bits)"},
        {"OffsetsOneValue", image(object(entry("a", "U8", "[0]", "[0]"))),
         "tensor 'a': data_offsets must hold exactly 2 values [begin, end], found 1"},
        {"OffsetsThreeValues", image(object(entry("a", "U8", "[1]", "[0,1,1]")), "x"),
         "tensor 'a': data_offsets must hold exactly 2 values [begin, end], found 3"},
        {"OffsetsNotArray", image(object(entry("a", "U8", "[1]", "{\"begin\":0}")), "x"),
         "tensor 'a': data_offsets must be an array [begin, end], found an object"},
        // --- layout of the data buffer
        {"FirstTensorNotAtZero", image(object(entry("a", "U8", "[4]", "[4,8]")), "12345678"),
         "tensor 'a': data_offsets [4, 8] leave a gap of 4 bytes at the start of the data buffer "
         "(the first tensor must begin at 0)"},
        {"Gap",
         image(object(entry("a", "U8", "[4]", "[0,4]") + "," + entry("b", "U8", "[4]", "[6,10]")),
               "0123456789"),
         "tensor 'b': data_offsets [6, 10] leave a gap of 2 bytes after tensor 'a', which ends at "
         "4"},
        {"Overlap",
         image(object(entry("b", "U8", "[4]", "[2,6]") + "," + entry("a", "U8", "[4]", "[0,4]")),
               "012345"),
         "tensor 'b': data_offsets [2, 6] overlap tensor 'a', which ends at 4"},
        {"EndBeforeBegin",
         image(object(entry("a", "U8", "[4]", "[0,4]") + "," + entry("b", "U8", "[0]", "[4,2]")),
               "0123"),
         "tensor 'b': data_offsets [4, 2] end before they begin"},
        {"ByteSizeMismatch",
         image(object(entry("a.weight", "F32", "[2,2]", "[0,12]")), std::string(12, '\0')),
         "tensor 'a.weight': data_offsets [0, 12] hold 12 bytes but F32 shape [2, 2] needs 16"},
        {"RankZeroSizeMismatch", image(object(entry("s", "F64", "[]", "[0,4]")), "abcd"),
         "tensor 's': data_offsets [0, 4] hold 4 bytes but F64 shape [] needs 8"},
        {"MisalignedF4", image(object(entry("a", "F4", "[3]", "[0,2]")), "xx"),
         "tensor 'a': F4 shape [3] is 12 bits, not a whole number of bytes"},
        {"MisalignedF6", image(object(entry("a", "F6_E3M2", "[2,3]", "[0,5]")), "xxxxx"),
         "tensor 'a': F6_E3M2 shape [2, 3] is 36 bits, not a whole number of bytes"},
        {"ElementCountOverflow",
         image(object(entry("a", "U8", "[4294967296,4294967296]", "[0,0]"))),
         "tensor 'a': U8 shape [4294967296, 4294967296] is too large: its size overflows 64 bits"},
        {"BitCountOverflow", image(object(entry("a", "F64", "[2305843009213693952]", "[0,0]"))),
         "tensor 'a': F64 shape [2305843009213693952] is too large: its size overflows 64 bits"},
        {"TrailingBytes", image(ok_header, bytes16 + "tail"),
         "file has 4 bytes trailing after the last tensor (the tensors cover 16 of the 20 data "
         "bytes)"},
        {"TrailingBytesNoTensors", image("{}", "x"),
         "file has 1 byte trailing after the last tensor (the tensors cover 0 of the 1 data "
         "bytes)"},
        {"TruncatedData", image(ok_header, bytes16.substr(0, 10)),
         "file is truncated: the tensors need 16 bytes of data but 10 follow the header"},
        {"HeaderWithoutData", image(ok_header),
         "file is truncated: the tensors need 16 bytes of data but 0 follow the header"},
    };
    return cases;
}

}  // namespace loom::test
