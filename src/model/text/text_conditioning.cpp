#include "loom/model/text/text_conditioning.h"

#include "loom/core/error.h"

namespace loom {

namespace {

constexpr const char* kContext = "context";
constexpr const char* kTextEmbeds = "text_embeds";
constexpr const char* kContextMask = "context_mask";

}  // namespace

NamedTensors TextConditioning::to_named(std::int64_t index) const {
    NamedTensors out{{kContext, context[index]}};
    if (text_embeds.defined()) out.emplace_back(kTextEmbeds, text_embeds[index]);
    if (context_mask.defined()) out.emplace_back(kContextMask, context_mask[index]);
    return out;
}

TextConditioning TextConditioning::from_named(const NamedTensors& tensors,
                                              const std::string& source) {
    TextConditioning c;
    for (const auto& [name, tensor] : tensors) {
        if (name == kContext) c.context = tensor.unsqueeze(0);
        if (name == kTextEmbeds) c.text_embeds = tensor.unsqueeze(0);
        if (name == kContextMask) c.context_mask = tensor.unsqueeze(0);
    }
    if (!c.context.defined()) {
        throw FormatError(source, "holds no 'context' tensor (a text conditioning needs one)");
    }
    return c;
}

}  // namespace loom
