#include "loom/train/adamw_8bit.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "loom/core/error.h"

namespace loom {

namespace {

// create_dynamic_map(signed, max_exponent_bits=7, total_bits=8), computed as bitsandbytes does:
// float32 linspace and means, scaled by powers of ten in float32, sorted.
at::Tensor make_dynamic_map(bool is_signed) {
    constexpr int kMaxExponentBits = 7;
    constexpr int kNonSignBits = 7;
    std::vector<double> data;
    for (int i = 0; i < kMaxExponentBits; ++i) {
        const int64_t fraction_items = is_signed
                                           ? (1LL << (i + kNonSignBits - kMaxExponentBits)) + 1
                                           : (1LL << (i + kNonSignBits - kMaxExponentBits + 1)) + 1;
        const at::Tensor boundaries = at::linspace(0.1, 1, fraction_items, at::kFloat);
        const at::Tensor means = (boundaries.slice(0, 0, -1) + boundaries.slice(0, 1)) / 2.0;
        const double scale = std::pow(10.0, -(kMaxExponentBits - 1) + i);
        const at::Tensor positive = (means * scale).contiguous();
        const float* p = positive.data_ptr<float>();
        for (int64_t j = 0; j < positive.numel(); ++j) data.push_back(p[j]);
        if (is_signed) {
            const at::Tensor negative = (means * -scale).contiguous();
            const float* n = negative.data_ptr<float>();
            for (int64_t j = 0; j < negative.numel(); ++j) data.push_back(n[j]);
        }
    }
    data.push_back(0.0);
    data.push_back(1.0);
    while (data.size() < 256) data.push_back(0.0);
    std::sort(data.begin(), data.end());
    std::vector<float> values(data.begin(), data.end());
    return at::tensor(values, at::kFloat);
}

// bitsandbytes' CPU quantizer table for `code`: entry i is the code index for the normalised
// value (2i / 65535) - 1, the number of midpoints between neighbouring codes below it.
std::vector<std::uint8_t> make_table(const at::Tensor& code) {
    const at::Tensor c = code.to(at::kFloat).contiguous().cpu();
    const float* v = c.data_ptr<float>();
    std::vector<float> mid(255);
    for (int j = 0; j < 255; ++j) mid[j] = 0.5f * (v[j] + v[j + 1]);
    std::vector<std::uint8_t> table(65536);
    for (int i = 0; i < 65536; ++i) {
        const float x = static_cast<float>(i);
        const float value = (x + x) / 65535.0f + -1.0f;
        table[i] = static_cast<std::uint8_t>(std::lower_bound(mid.begin(), mid.end(), value) -
                                             mid.begin());
    }
    return table;
}

// The table of a code map, built once per distinct map (keyed by its 256 values; in practice
// the two dynamic maps).
const std::vector<std::uint8_t>& table_for(const at::Tensor& code) {
    static std::mutex mutex;
    static std::map<std::vector<float>, std::vector<std::uint8_t>> tables;
    const at::Tensor c = code.to(at::kFloat).contiguous().cpu();
    std::vector<float> key(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    std::lock_guard<std::mutex> lock(mutex);
    auto it = tables.find(key);
    if (it == tables.end()) it = tables.emplace(key, make_table(code)).first;
    return it->second;
}

// The exact CPU kernel: per block, absmax = max |x| (0 for an all-zero block, whose codes are 0),
// then code = table[(int) fma((clamp(x * (1 / absmax), -1, 1) + 1) * 0.5, 65535, 0.5)].
std::pair<at::Tensor, at::Tensor> quantize_on_host(const at::Tensor& values, const at::Tensor& code,
                                                   std::int64_t block) {
    const at::Tensor x = values.contiguous();
    const int64_t n = x.numel();
    const int64_t blocks = (n + block - 1) / block;
    at::Tensor codes = at::empty(x.sizes(), x.options().dtype(at::kByte));
    at::Tensor absmax = at::empty({blocks}, x.options().dtype(at::kFloat));
    const std::vector<std::uint8_t>& table = table_for(code);
    const float* in = x.data_ptr<float>();
    std::uint8_t* out = codes.data_ptr<std::uint8_t>();
    float* amax = absmax.data_ptr<float>();
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t begin = b * block;
        const int64_t end = std::min(n, begin + block);
        float m = 0.0f;
        for (int64_t i = begin; i < end; ++i) m = std::max(m, std::fabs(in[i]));
        amax[b] = m;
        if (m == 0.0f) {
            std::fill(out + begin, out + end, std::uint8_t{0});
            continue;
        }
        const float inv = 1.0f / m;
        for (int64_t i = begin; i < end; ++i) {
            const float t = std::min(1.0f, std::max(-1.0f, in[i] * inv));
            const int k = static_cast<int>(std::fmaf((t + 1.0f) * 0.5f, 65535.0f, 0.5f));
            out[i] = table[static_cast<std::size_t>(k)];
        }
    }
    return {codes, absmax};
}

// The same formula as tensor operations, for device tensors (no fused multiply-add: a value on
// a bin's edge may take the neighbouring code).
std::pair<at::Tensor, at::Tensor> quantize_on_device(const at::Tensor& values,
                                                     const at::Tensor& code, std::int64_t block) {
    const int64_t n = values.numel();
    const int64_t blocks = (n + block - 1) / block;
    at::Tensor flat = values.reshape({-1});
    if (blocks * block != n) flat = at::constant_pad_nd(flat, {0, blocks * block - n});
    const at::Tensor rows = flat.view({blocks, block});
    const at::Tensor absmax = rows.abs().amax(1);
    const at::Tensor inv = at::where(absmax > 0, absmax.reciprocal(), at::zeros_like(absmax));
    const at::Tensor t = (rows * inv.unsqueeze(1)).clamp(-1.0, 1.0);
    const at::Tensor index = ((t + 1.0) * 0.5 * 65535.0 + 0.5).to(at::kLong);
    const std::vector<std::uint8_t>& host = table_for(code);
    const at::Tensor table =
        at::tensor(std::vector<int64_t>(host.begin(), host.end()), at::kLong).to(values.device());
    const at::Tensor codes = table.index_select(0, index.reshape({-1}))
                                 .narrow(0, 0, n)
                                 .to(at::kByte)
                                 .view(values.sizes());
    return {codes, absmax};
}

}  // namespace

const at::Tensor& dynamic_map(bool is_signed) {
    static const at::Tensor signed_map = make_dynamic_map(true);
    static const at::Tensor unsigned_map = make_dynamic_map(false);
    return is_signed ? signed_map : unsigned_map;
}

std::pair<at::Tensor, at::Tensor> quantize_blockwise(const at::Tensor& values,
                                                     const at::Tensor& code, std::int64_t block) {
    TORCH_CHECK(values.scalar_type() == at::kFloat, "quantize_blockwise takes float32 values");
    if (values.device().is_cpu()) return quantize_on_host(values, code, block);
    return quantize_on_device(values, code, block);
}

at::Tensor dequantize_blockwise(const at::Tensor& codes, const at::Tensor& absmax,
                                const at::Tensor& code, std::int64_t block) {
    const int64_t n = codes.numel();
    const at::Tensor values =
        code.to(codes.device()).index_select(0, codes.reshape({-1}).to(at::kLong));
    const at::Tensor scales = absmax.repeat_interleave(block).narrow(0, 0, n);
    return (values * scales).view(codes.sizes());
}

AdamW8bit::AdamW8bit(std::vector<at::Tensor> params, AdamW8bitOptions options)
    : Optimizer(std::move(params)), options_(options) {
    torch::NoGradGuard no_grad;
    for (const at::Tensor& p : params_) {
        Slot s;
        s.quantized = p.numel() >= options_.min_8bit_size;
        const auto floats = p.options().dtype(at::kFloat).requires_grad(false);
        if (s.quantized) {
            const int64_t blocks = (p.numel() + kBlockSize - 1) / kBlockSize;
            s.state1 = at::zeros(p.sizes(), floats.dtype(at::kByte));
            s.state2 = at::zeros(p.sizes(), floats.dtype(at::kByte));
            s.absmax1 = at::zeros({blocks}, floats);
            s.absmax2 = at::zeros({blocks}, floats);
        } else {
            s.state1 = at::zeros(p.sizes(), floats);
            s.state2 = at::zeros(p.sizes(), floats);
            s.absmax1 = at::zeros({1}, floats);
            s.absmax2 = at::zeros({1}, floats);
        }
        slots_.push_back(std::move(s));
    }
}

// bitsandbytes' CPU update, operation for operation (backends/cpu/ops.py): the same ATen
// operations in the same order give the same float32 results.
void AdamW8bit::step(double lr) {
    torch::NoGradGuard no_grad;
    const int64_t t = step_ + 1;
    const double beta1 = options_.beta1;
    const double beta2 = options_.beta2;
    const double wd = options_.weight_decay;
    const double correction1 = 1.0 - std::pow(beta1, static_cast<double>(t));
    const double correction2 = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t)));
    struct Update {
        std::size_t index;
        at::Tensor param;
        Slot slot;
    };
    // Phase 1: every new value, out of place. An OOM here changes nothing.
    std::vector<Update> updates;
    updates.reserve(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
        const at::Tensor& p = params_[i];
        if (!p.grad().defined()) continue;
        const Slot& old = slots_[i];
        const at::Tensor grad = p.grad().to(at::kFloat);
        at::Tensor value = p.detach().to(at::kFloat).clone();
        Slot next;
        next.quantized = old.quantized;
        if (old.quantized) {
            at::Tensor m = dequantize_blockwise(old.state1, old.absmax1,
                                                dynamic_map(true).to(p.device()), kBlockSize);
            at::Tensor v = dequantize_blockwise(old.state2, old.absmax2,
                                                dynamic_map(false).to(p.device()), kBlockSize);
            m.mul_(beta1).add_(grad, 1.0 - beta1);
            v.mul_(beta2).addcmul_(grad, grad, 1.0 - beta2);
            const at::Tensor denom = (v.sqrt() / correction2).add_(options_.eps);
            if (wd > 0.0) value.mul_(1.0 - lr * wd);
            value.addcdiv_(m, denom, -lr / correction1);
            std::tie(next.state1, next.absmax1) =
                quantize_blockwise(m, dynamic_map(true), kBlockSize);
            std::tie(next.state2, next.absmax2) =
                quantize_blockwise(v, dynamic_map(false), kBlockSize);
        } else {
            at::Tensor m = old.state1.clone();
            at::Tensor v = old.state2.clone();
            m.mul_(beta1).add_(grad, 1.0 - beta1);
            v.mul_(beta2).addcmul_(grad, grad, 1.0 - beta2);
            const double step_size = -lr * correction2 / correction1;
            if (wd > 0.0) value.mul_(1.0 - lr * wd);
            const at::Tensor update = m / (v.sqrt() + options_.eps * correction2);
            value.add_(update, step_size * 1.0);
            next.state1 = m;
            next.state2 = v;
            next.absmax1 = old.absmax1;
            next.absmax2 = old.absmax2;
        }
        updates.push_back({i, std::move(value), std::move(next)});
    }
    // Phase 2: commit with in-place copies, which allocate nothing.
    for (Update& u : updates) {
        params_[u.index].detach().copy_(u.param);
        Slot& s = slots_[u.index];
        s.state1.copy_(u.slot.state1);
        s.state2.copy_(u.slot.state2);
        s.absmax1.copy_(u.slot.absmax1);
        s.absmax2.copy_(u.slot.absmax2);
    }
    step_ = t;
}

OptimizerState AdamW8bit::state() const {
    OptimizerState s;
    s.kind = "adamw8bit";
    s.steps = step_;
    for (const Slot& slot : slots_) {
        s.lists["state1"].push_back(slot.state1.cpu());
        s.lists["state2"].push_back(slot.state2.cpu());
        s.lists["absmax1"].push_back(slot.absmax1.cpu());
        s.lists["absmax2"].push_back(slot.absmax2.cpu());
    }
    return s;
}

void AdamW8bit::load_state(const OptimizerState& state) {
    check_optimizer_state(state, "adamw8bit", {"state1", "state2", "absmax1", "absmax2"},
                          params_.size());
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        Slot& s = slots_[i];
        for (const auto& [name, target] :
             std::initializer_list<std::pair<const char*, at::Tensor*>>{{"state1", &s.state1},
                                                                        {"state2", &s.state2},
                                                                        {"absmax1", &s.absmax1},
                                                                        {"absmax2", &s.absmax2}}) {
            const at::Tensor& source = state.lists.at(name)[i];
            if (source.sizes() != target->sizes() ||
                source.scalar_type() != target->scalar_type()) {
                throw Error("optimizer state '" + std::string(name) + "' of parameter " +
                            std::to_string(i) + " does not match the parameter (" +
                            std::to_string(source.numel()) + " elements)");
            }
            target->copy_(source);
        }
    }
    step_ = state.steps;
}

std::uint64_t AdamW8bit::state_bytes() const {
    std::uint64_t bytes = 0;
    for (const Slot& s : slots_) {
        bytes += s.state1.nbytes() + s.state2.nbytes() + s.absmax1.nbytes() + s.absmax2.nbytes();
    }
    return bytes;
}

}  // namespace loom
