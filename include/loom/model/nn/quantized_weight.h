#pragma once

// Weight-only quantization of a frozen layer's weight (ai-toolkit's model.quantize / qtype,
// quantize_te / qtype_te; the ladder's low_vram level 2): the weight is held in 8 or 4 bits and
// dequantized into the compute dtype for each computation that uses it, the copy dying with that
// computation. The LoRA and its optimizer state never are quantized.
//
// The qtypes, as optimum-quanto (ai-toolkit's quantizer) computes them, per output channel (a
// weight is read as [out, rest]: a Conv2d's [out, in, k, k] as [out, in·k·k]):
//   kFloat8  float8 e4m3 with a float32 scale per output channel: absmax / 448  (1 byte/weight)
//   kInt8    symmetric int8, a float32 scale per output channel: absmax / 127,
//            rounded to nearest even and clamped to [-128, 127]               (1 byte/weight)
//   kUInt4   affine 4-bit in groups along the row (uint4_group_size: quanto's rule), scale
//            (max-min)/15 and the group minimum, both float16; codes round((w - min) / scale)
//            in [0, 15], two per byte (the even index in the low nibble; a row of odd length
//            ends with a zero nibble).                (0.5 byte/weight + 4 bytes per group)

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/choices.h"

namespace loom {

using config::QType;

// The uint4 group for a row of `row_length` weights, as optimum-quanto's QModuleMixin picks it:
// the first of 128, 96, 64, 32 that divides a row longer than 128; otherwise (a short row, or a
// long one none divides) the whole row is one group. A fixed 128 would pad short rows: a 32-wide
// Linear would pay for 128 codes.
int64_t uint4_group_size(int64_t row_length);

struct QuantizedWeight {
    QType qtype = QType::kFloat8;
    std::vector<int64_t> shape;  // the float weight's
    at::Tensor data;             // float8 / int8 [out, rest]; uint4: uint8 [out, ceil(rest/2)]
    at::Tensor scale;            // float32 [out, 1]; uint4: float16 [out, groups, 1]
    at::Tensor minimum;          // uint4: float16 [out, groups, 1]; undefined otherwise

    // Bytes held (data, scales, minimums).
    int64_t bytes() const;
};

// Quantizes a floating-point weight (on any device; computed in float32 there).
QuantizedWeight quantize_weight(const at::Tensor& weight, QType qtype);
// Whether `q`'s tensors have the dtypes and shapes quantize_weight gives a weight of `q.shape`
// in `q.qtype`: codes read back from a file (a cache another loom wrote, or a damaged one) are
// used only then.
bool has_quantized_layout(const QuantizedWeight& q);
// The weight back in `dtype`, in its original shape, on the quantized tensors' device.
at::Tensor dequantize_weight(const QuantizedWeight& q, at::ScalarType dtype);

}  // namespace loom
