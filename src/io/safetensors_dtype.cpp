#include <limits>

#include "loom/io/safetensors.h"
#include "safetensors_format.h"

namespace loom {

namespace {

struct DTypeEntry {
    DType dtype;
    const char* name;
    int bits;
};

// ref: safetensors/src/tensor.rs enum Dtype, bitsize()
constexpr DTypeEntry kDTypeTable[] = {
    {DType::kBool, "BOOL", 8},
    {DType::kF4, "F4", 4},
    {DType::kF6E2M3, "F6_E2M3", 6},
    {DType::kF6E3M2, "F6_E3M2", 6},
    {DType::kU8, "U8", 8},
    {DType::kI8, "I8", 8},
    {DType::kF8E5M2, "F8_E5M2", 8},
    {DType::kF8E4M3, "F8_E4M3", 8},
    {DType::kF8E8M0, "F8_E8M0", 8},
    {DType::kF8E4M3Fnuz, "F8_E4M3FNUZ", 8},
    {DType::kF8E5M2Fnuz, "F8_E5M2FNUZ", 8},
    {DType::kI16, "I16", 16},
    {DType::kU16, "U16", 16},
    {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},
    {DType::kI32, "I32", 32},
    {DType::kU32, "U32", 32},
    {DType::kF32, "F32", 32},
    {DType::kC64, "C64", 64},
    {DType::kF64, "F64", 64},
    {DType::kI64, "I64", 64},
    {DType::kU64, "U64", 64},
};
static_assert(sizeof(kDTypeTable) / sizeof(kDTypeTable[0]) == kAllDTypes.size());

const DTypeEntry& dtype_entry(DType dtype) {
    return kDTypeTable[static_cast<std::size_t>(dtype)];
}

}  // namespace

const char* dtype_name(DType dtype) {
    return dtype_entry(dtype).name;
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (const DTypeEntry& e : kDTypeTable) {
        if (name == e.name) return e.dtype;
    }
    return std::nullopt;
}

int dtype_bits(DType dtype) {
    return dtype_entry(dtype).bits;
}

std::int64_t TensorInfo::numel() const {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;
    return n;
}

namespace safetensors_detail {

std::string all_dtype_names() {
    std::string names;
    for (const DTypeEntry& e : kDTypeTable) {
        if (!names.empty()) names += ", ";
        names += e.name;
    }
    return names;
}

namespace {

bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
    if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return false;
    *out = a * b;
    return true;
}

}  // namespace

std::optional<std::uint64_t> total_bits(DType dtype, const std::vector<std::int64_t>& shape) {
    std::uint64_t n = 1;
    for (const std::int64_t d : shape) {
        if (!checked_mul(n, static_cast<std::uint64_t>(d), &n)) return std::nullopt;
    }
    if (!checked_mul(n, static_cast<std::uint64_t>(dtype_bits(dtype)), &n)) return std::nullopt;
    return n;
}

}  // namespace safetensors_detail

}  // namespace loom
