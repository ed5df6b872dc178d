#pragma once

// safetensors files as at::Tensors: the io layer reads and writes bytes; this maps its dtypes
// to torch's and copies tensors in and out.

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/io/safetensors.h"

namespace loom {

// nullopt for safetensors dtypes torch has no type for (F4, F6_*, F8_E8M0).
std::optional<at::ScalarType> to_scalar_type(DType dtype);
// Throws loom::Error for torch types safetensors cannot hold.
DType to_safetensors_dtype(at::ScalarType type);

// A CPU tensor holding a copy of one tensor of `file` (unaligned data is handled).
// Throws FormatError naming the file and tensor for dtypes torch cannot represent.
at::Tensor read_tensor(const SafetensorsFile& file, const TensorInfo& info);

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Every tensor of a file, in name order.
NamedTensors read_all_tensors(const std::filesystem::path& path);

// Writes tensors (moved to CPU and made contiguous) atomically, with metadata.
void write_tensors(const std::filesystem::path& path, const NamedTensors& tensors,
                   const SafetensorsMetadata& metadata = {});

}  // namespace loom
