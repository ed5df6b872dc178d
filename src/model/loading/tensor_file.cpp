#include "loom/model/loading/tensor_file.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "loom/core/error.h"

namespace loom {

std::optional<at::ScalarType> to_scalar_type(DType dtype) {
    switch (dtype) {
        case DType::kBool: return at::kBool;
        case DType::kU8: return at::kByte;
        case DType::kI8: return at::kChar;
        case DType::kI16: return at::kShort;
        case DType::kU16: return at::kUInt16;
        case DType::kF16: return at::kHalf;
        case DType::kBF16: return at::kBFloat16;
        case DType::kI32: return at::kInt;
        case DType::kU32: return at::kUInt32;
        case DType::kF32: return at::kFloat;
        case DType::kC64: return at::kComplexFloat;
        case DType::kF64: return at::kDouble;
        case DType::kI64: return at::kLong;
        case DType::kU64: return at::kUInt64;
        case DType::kF8E4M3: return at::kFloat8_e4m3fn;
        case DType::kF8E5M2: return at::kFloat8_e5m2;
        case DType::kF8E4M3Fnuz: return at::kFloat8_e4m3fnuz;
        case DType::kF8E5M2Fnuz: return at::kFloat8_e5m2fnuz;
        default: return std::nullopt;
    }
}

DType to_safetensors_dtype(at::ScalarType type) {
    for (DType d : kAllDTypes) {
        if (to_scalar_type(d) == type) return d;
    }
    throw Error(std::string("torch dtype ") + c10::toString(type) +
                " cannot be stored in a safetensors file");
}

at::Tensor read_tensor(const SafetensorsFile& file, const TensorInfo& info) {
    const std::optional<at::ScalarType> type = to_scalar_type(info.dtype);
    if (!type) {
        throw FormatError(file.path().string(), "tensor '" + info.name + "' has dtype " +
                                                    dtype_name(info.dtype) +
                                                    ", which torch cannot represent");
    }
    at::Tensor out = at::empty(info.shape, at::TensorOptions().dtype(*type));
    const ByteView bytes = file.data(info);
    if (bytes.size > 0) std::memcpy(out.data_ptr(), bytes.data, bytes.size);  // handles alignment
    return out;
}

NamedTensors read_all_tensors(const std::filesystem::path& path) {
    const SafetensorsFile file = SafetensorsFile::open(path);
    NamedTensors out;
    for (const TensorInfo& info : file.tensors())
        out.emplace_back(info.name, read_tensor(file, info));
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
}

void write_tensors(const std::filesystem::path& path, const NamedTensors& tensors,
                   const SafetensorsMetadata& metadata) {
    std::vector<at::Tensor> keep;  // owns the contiguous CPU copies while writing
    std::vector<TensorToWrite> views;
    keep.reserve(tensors.size());
    views.reserve(tensors.size());
    for (const auto& [name, tensor] : tensors) {
        at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
        keep.push_back(t);
        views.push_back({name, to_safetensors_dtype(t.scalar_type()), t.sizes().vec(), t.data_ptr(),
                         static_cast<std::uint64_t>(t.nbytes())});
    }
    write_safetensors(path, views, metadata);
}

}  // namespace loom
