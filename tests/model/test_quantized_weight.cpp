// Weight-only quantization (model/nn/quantized_weight.h) against the reference quantizer of
// tests/parity/quantization_reference.py, itself checked against optimum-quanto's qfloat8 and
// qint8 (label `parity`): codes and scales equal, dequantized weights equal; the qtype words
// ai-toolkit jobs write; the bytes each qtype holds against bf16.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "loom/model/loading/tensor_file.h"
#include "loom/model/nn/quantized_weight.h"
#include "parity_cases.h"

namespace loom {
namespace {

using config::choose_qtype;
using config::parse_qtype;
using config::QTypeChoice;

std::map<std::string, at::Tensor> reference() {
    std::map<std::string, at::Tensor> out;
    for (auto& [name, t] :
         read_all_tensors(testing::parity_dir() / "quantization" / "cases.safetensors")) {
        out[name] = t;
    }
    return out;
}

TEST(QuantizedWeight, CodesScalesAndWeightsEqualTheReference) {
    const auto ref = reference();
    for (const char* name :
         {"linear", "row300", "row288", "row320", "odd", "conv", "wide_range", "special"}) {
        SCOPED_TRACE(name);
        const at::Tensor w = ref.at(std::string(name) + ".weight");
        for (QType qtype : {QType::kFloat8, QType::kInt8, QType::kUInt4}) {
            const std::string key = std::string(name) + "." + to_string(qtype) + ".";
            SCOPED_TRACE(key);
            const QuantizedWeight q = quantize_weight(w, qtype);
            const at::Tensor data =
                qtype == QType::kFloat8 ? q.data.view(at::kByte) : q.data;  // float8 as bytes
            EXPECT_TRUE(torch::equal(data, ref.at(key + "data")));
            EXPECT_TRUE(torch::equal(q.scale, ref.at(key + "scale")));
            if (qtype == QType::kUInt4) {
                EXPECT_TRUE(torch::equal(q.minimum, ref.at(key + "minimum")));
            }
            const at::Tensor back = dequantize_weight(q, at::kFloat);
            EXPECT_EQ(back.sizes(), w.sizes());
            EXPECT_TRUE(torch::allclose(back, ref.at(key + "dequantized"), 0, 1e-6));
        }
    }
}

TEST(QuantizedWeight, UInt4GroupsAsQuantoDoes) {
    // quantization_reference.py checks the same rule against quanto's QLinear.
    EXPECT_EQ(uint4_group_size(32), 32);  // a short row is one group, not padded to 128
    EXPECT_EQ(uint4_group_size(128), 128);
    EXPECT_EQ(uint4_group_size(3072), 128);
    EXPECT_EQ(uint4_group_size(288), 96);
    EXPECT_EQ(uint4_group_size(320), 64);
    EXPECT_EQ(uint4_group_size(352), 32);
    EXPECT_EQ(uint4_group_size(300), 300);  // none divides: the whole row
    EXPECT_EQ(uint4_group_size(27), 27);
    const QuantizedWeight q = quantize_weight(torch::randn({4, 288}), QType::kUInt4);
    EXPECT_EQ(q.scale.sizes(), (c10::IntArrayRef{4, 3, 1}));
    EXPECT_EQ(q.data.sizes(), (c10::IntArrayRef{4, 144}));
    const QuantizedWeight odd = quantize_weight(torch::randn({2, 3, 3, 3}), QType::kUInt4);
    EXPECT_EQ(odd.data.sizes(), (c10::IntArrayRef{2, 14}));  // 27 codes and a zero nibble
    EXPECT_EQ(dequantize_weight(odd, at::kFloat).sizes(), (c10::IntArrayRef{2, 3, 3, 3}));
}

// Codes read back from a file are used only in the layout quantize_weight gives.
TEST(QuantizedWeight, LayoutCheckAcceptsOnlyWhatQuantizeWeightGives) {
    const at::Tensor w = torch::randn({6, 300});
    for (QType qtype : {QType::kFloat8, QType::kInt8, QType::kUInt4}) {
        SCOPED_TRACE(to_string(qtype));
        const QuantizedWeight q = quantize_weight(w, qtype);
        EXPECT_TRUE(has_quantized_layout(q));
        QuantizedWeight other = q;
        other.qtype = qtype == QType::kUInt4 ? QType::kInt8 : QType::kUInt4;
        EXPECT_FALSE(has_quantized_layout(other));
        QuantizedWeight wider = q;
        wider.shape = {6, 301};
        EXPECT_FALSE(has_quantized_layout(wider));
        QuantizedWeight rescaled = q;
        rescaled.scale = at::cat({q.scale, q.scale}, 1);
        EXPECT_FALSE(has_quantized_layout(rescaled));
    }
    // uint4 grouped in 128s and padded (the layout before quanto's rule) is refused: 300 = 1 group.
    QuantizedWeight padded = quantize_weight(w, QType::kUInt4);
    padded.data = at::zeros({6, 192}, at::kByte);
    padded.scale = padded.minimum = at::ones({6, 3, 1}, at::kHalf);
    EXPECT_FALSE(has_quantized_layout(padded));
}

TEST(QuantizedWeight, ErrorIsBoundedByTheQType) {
    torch::manual_seed(3);
    const at::Tensor w = torch::randn({32, 512});
    const double range = w.abs().max().item<double>();
    // Relative to the weights' range: int8 half a step of 1/127, float8 a 3-bit mantissa,
    // uint4 half a step of 1/15 of a group's range.
    const std::map<QType, double> bound = {
        {QType::kInt8, 0.5 / 127}, {QType::kFloat8, 1.0 / 16}, {QType::kUInt4, 0.5 / 15 * 2}};
    for (const auto& [qtype, limit] : bound) {
        const at::Tensor back = dequantize_weight(quantize_weight(w, qtype), at::kFloat);
        const double error = (back - w).abs().max().item<double>() / range;
        EXPECT_LE(error, limit) << to_string(qtype);
        EXPECT_GT(error, 0.0) << to_string(qtype);  // it is lossy: the test would see a no-op
    }
    // bf16 output from the same codes.
    const QuantizedWeight q = quantize_weight(w, QType::kInt8);
    EXPECT_EQ(dequantize_weight(q, at::kBFloat16).scalar_type(), at::kBFloat16);
}

TEST(QuantizedWeight, BytesAgainstBf16) {
    // A Flux-sized Linear (3072 x 12288 would be slow to build here; the ratios are per weight).
    const at::Tensor w = torch::randn({256, 3072});
    const double bf16 = static_cast<double>(w.numel()) * 2;
    EXPECT_LE(quantize_weight(w, QType::kFloat8).bytes() / bf16, 0.52);
    EXPECT_LE(quantize_weight(w, QType::kInt8).bytes() / bf16, 0.52);
    EXPECT_LE(quantize_weight(w, QType::kUInt4).bytes() / bf16, 0.28);
}

TEST(QuantizedWeight, QTypeWordsAsAiToolkitWritesThem) {
    EXPECT_EQ(parse_qtype("qfloat8"), QType::kFloat8);
    EXPECT_EQ(parse_qtype("float8"), QType::kFloat8);
    EXPECT_EQ(parse_qtype("qint8"), QType::kInt8);
    EXPECT_EQ(parse_qtype("int8"), QType::kInt8);
    EXPECT_EQ(parse_qtype("qint4"), QType::kUInt4);
    EXPECT_EQ(parse_qtype("uint4"), QType::kUInt4);
    EXPECT_EQ(parse_qtype("qfloat8_e5m2"), std::nullopt);
    // ai-toolkit's Wan 2.2 example: uint4 with an accuracy-recovery adapter loom does not apply.
    const QTypeChoice adapter = choose_qtype(
        "uint4|ostris/accuracy_recovery_adapters/wan22_14b_t2i_torchao_uint4.safetensors");
    EXPECT_EQ(adapter.qtype, QType::kUInt4);
    EXPECT_NE(adapter.note.find("not supported yet"), std::string::npos) << adapter.note;
    // Qwen-Image's example: uint3, which loom replaces with uint4 and says so.
    const QTypeChoice three = choose_qtype("uint3|qwen_image_torchao_uint3.safetensors");
    EXPECT_EQ(three.qtype, QType::kUInt4);
    EXPECT_NE(three.note.find("'uint3|qwen_image_torchao_uint3.safetensors' is not supported yet; "
                              "loom quantizes with uint4 instead"),
              std::string::npos)
        << three.note;
    EXPECT_TRUE(choose_qtype("qfloat8").note.empty());
}

}  // namespace
}  // namespace loom
