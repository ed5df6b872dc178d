#include "loom/model/nn/memory_format.h"

#include <torch/nn/module.h>

namespace loom {

void set_conv_weights_format(torch::nn::Module& module, c10::MemoryFormat format) {
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : module.parameters()) {
        if (p.dim() != 4 || p.is_contiguous(format)) continue;
        p.set_data(p.data().contiguous(format));
    }
}

at::Tensor channels_last_if(const at::Tensor& x, bool channels_last) {
    if (!channels_last || x.dim() != 4) return x;
    return x.contiguous(c10::MemoryFormat::ChannelsLast);
}

}  // namespace loom
