#pragma once

// 8-bit AdamW (`optimizer: adamw8bit`), bitsandbytes' AdamW8bit as ai-toolkit builds it
// (bitsandbytes 0.50, its CPU path): both moments of every parameter with at least
// `min_8bit_size` elements are kept as one byte per element — a code into bitsandbytes'
// dynamic quantization map (signed for the first moment, unsigned for the second) times the
// absolute maximum of its block of 256 — about 2 bytes of state per parameter instead of 8.
// Smaller parameters keep float32 moments, as bitsandbytes does. Each step dequantizes, updates
// in float32 (decoupled weight decay before the step, eps added after dividing by the bias
// correction's square root) and requantizes with the new block maxima. All or nothing: the new
// codes, maxima and parameters are computed for every parameter before any is written.
//
// On the CPU (cpu, sim) the quantizer is bitsandbytes' CPU kernel to the bit (a 65536-bin table
// over [-1, 1], rounded with one fused multiply-add); on other devices the same formula runs as
// tensor operations, which can round a value lying on a bin's edge into its neighbour.

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

#include "loom/train/optimizer.h"

namespace loom {

struct AdamW8bitOptions {
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-6;           // ai-toolkit passes eps=1e-6
    double weight_decay = 0.01;  // bitsandbytes' default, which ai-toolkit passes through
    std::int64_t min_8bit_size = 4096;
};

class AdamW8bit final : public Optimizer {
  public:
    static constexpr std::int64_t kBlockSize = 256;

    AdamW8bit(std::vector<at::Tensor> params, AdamW8bitOptions options);

    void step(double lr) override;
    std::int64_t steps_taken() const override { return step_; }
    // Lists "state1", "state2" (uint8 codes, or float32 moments for small parameters),
    // "absmax1", "absmax2" (float32 block maxima; one zero for small parameters).
    OptimizerState state() const override;
    void load_state(const OptimizerState& state) override;
    std::uint64_t state_bytes() const override;

    // Whether parameter `i` keeps 8-bit moments.
    bool quantized(std::size_t i) const { return slots_[i].quantized; }

  private:
    struct Slot {
        bool quantized = false;
        at::Tensor state1;  // uint8 codes or float32 exp_avg
        at::Tensor state2;  // uint8 codes or float32 exp_avg_sq
        at::Tensor absmax1;
        at::Tensor absmax2;
    };
    AdamW8bitOptions options_;
    std::vector<Slot> slots_;
    std::int64_t step_ = 0;
};

// bitsandbytes' create_dynamic_map(signed): 256 float32 values in [-1, 1] (signed: 127 negative,
// 0, 127 positive and 1.0) or [0, 1] (unsigned), on the host.
const at::Tensor& dynamic_map(bool is_signed);

// Blockwise quantization of a float32 tensor with `code` (a dynamic map): uint8 codes shaped as
// `values` and the float32 absolute maximum of each block of `block` elements.
std::pair<at::Tensor, at::Tensor> quantize_blockwise(const at::Tensor& values,
                                                     const at::Tensor& code, std::int64_t block);
// The inverse: code[codes[i]] * absmax[i / block], float32, shaped as `codes`.
at::Tensor dequantize_blockwise(const at::Tensor& codes, const at::Tensor& absmax,
                                const at::Tensor& code, std::int64_t block);

}  // namespace loom
