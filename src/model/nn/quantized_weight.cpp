#include "loom/model/nn/quantized_weight.h"

#include <ATen/ATen.h>

#include <limits>

#include "loom/core/error.h"

namespace loom {

namespace {

constexpr double kFloat8Max = 448.0;  // the largest finite float8 e4m3fn

// A zero row (or group) would divide by a zero scale: its scale is 1 (the codes are then 0).
at::Tensor nonzero_scale(const at::Tensor& scale) {
    return at::where(scale == 0, at::ones_like(scale), scale);
}

// The row-major [out, rest] view of a weight, in float32.
at::Tensor rows(const at::Tensor& weight) {
    return weight.to(at::kFloat).reshape({weight.size(0), -1});
}

QuantizedWeight quantize_uint4(const at::Tensor& w, QuantizedWeight q) {
    const int64_t out = w.size(0);
    const int64_t rest = w.size(1);
    const int64_t group = uint4_group_size(rest);
    const at::Tensor g = w.reshape({out, rest / group, group});
    const at::Tensor minimum = std::get<0>(g.min(2, true));
    const at::Tensor maximum = std::get<0>(g.max(2, true));
    // The codes are computed with the float16 scale and minimum that dequantization uses.
    q.scale = nonzero_scale((maximum - minimum) / 15.0).to(at::kHalf);
    q.minimum = minimum.to(at::kHalf);
    at::Tensor codes = at::round((g - q.minimum.to(at::kFloat)) / q.scale.to(at::kFloat))
                           .clamp(0, 15)
                           .to(at::kByte)
                           .reshape({out, rest});
    if (rest % 2 != 0) codes = at::cat({codes, at::zeros({out, 1}, codes.options())}, 1);
    codes = codes.reshape({out, codes.size(1) / 2, 2});
    q.data = codes.select(2, 0).bitwise_or(codes.select(2, 1).bitwise_left_shift(4)).contiguous();
    return q;
}

}  // namespace

int64_t uint4_group_size(int64_t row_length) {
    if (row_length > 128) {
        for (int64_t group : {128, 96, 64, 32}) {
            if (row_length % group == 0) return group;
        }
    }
    return row_length;
}

int64_t QuantizedWeight::bytes() const {
    int64_t n = 0;
    for (const at::Tensor* t : {&data, &scale, &minimum}) {
        if (t->defined()) n += static_cast<int64_t>(t->nbytes());
    }
    return n;
}

QuantizedWeight quantize_weight(const at::Tensor& weight, QType qtype) {
    if (!weight.is_floating_point() || weight.dim() < 2 || weight.numel() == 0) {
        throw Error("quantize_weight takes a floating-point weight of two or more dimensions");
    }
    QuantizedWeight q;
    q.qtype = qtype;
    q.shape = weight.sizes().vec();
    const at::Tensor w = rows(weight);
    if (qtype == QType::kUInt4) return quantize_uint4(w, std::move(q));
    const double qmax = qtype == QType::kFloat8 ? kFloat8Max : 127.0;
    q.scale = nonzero_scale(std::get<0>(w.abs().max(1, true)) / qmax);
    const at::Tensor scaled = w / q.scale;
    if (qtype == QType::kFloat8) {
        q.data = scaled.clamp(-kFloat8Max, kFloat8Max).to(at::kFloat8_e4m3fn);
    } else {
        q.data = at::round(scaled).clamp(-128, 127).to(at::kChar);
    }
    return q;
}

bool has_quantized_layout(const QuantizedWeight& q) {
    if (q.shape.size() < 2 || !q.data.defined() || !q.scale.defined()) return false;
    const int64_t out = q.shape[0];
    int64_t rest = 1;
    for (std::size_t i = 1; i < q.shape.size(); ++i) rest *= q.shape[i];
    const auto is = [](const at::Tensor& t, at::ScalarType dtype, std::vector<int64_t> sizes) {
        return t.defined() && t.scalar_type() == dtype && t.sizes() == at::IntArrayRef(sizes);
    };
    if (q.qtype == QType::kUInt4) {
        const int64_t groups = rest / uint4_group_size(rest);
        return is(q.data, at::kByte, {out, (rest + 1) / 2}) &&
               is(q.scale, at::kHalf, {out, groups, 1}) &&
               is(q.minimum, at::kHalf, {out, groups, 1});
    }
    const at::ScalarType codes = q.qtype == QType::kFloat8 ? at::kFloat8_e4m3fn : at::kChar;
    return is(q.data, codes, {out, rest}) && is(q.scale, at::kFloat, {out, 1}) &&
           !q.minimum.defined();
}

at::Tensor dequantize_weight(const QuantizedWeight& q, at::ScalarType dtype) {
    if (q.qtype != QType::kUInt4) {
        return (q.data.to(dtype) * q.scale.to(dtype)).reshape(q.shape);
    }
    const int64_t out = q.data.size(0);
    int64_t rest = 1;
    for (std::size_t i = 1; i < q.shape.size(); ++i) rest *= q.shape[i];
    const at::Tensor low = q.data.bitwise_and(15);
    const at::Tensor high = q.data.bitwise_right_shift(4);
    const at::Tensor codes = at::stack({low, high}, 2)
                                 .reshape({out, -1})
                                 .narrow(1, 0, rest)
                                 .reshape({out, q.scale.size(1), -1});
    const at::Tensor w = at::addcmul(q.minimum.to(dtype), codes.to(dtype), q.scale.to(dtype));
    return w.reshape(q.shape);
}

}  // namespace loom
