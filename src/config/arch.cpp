#include "loom/config/arch.h"

namespace loom::config {

const std::vector<ArchName>& known_archs() {
    // ai-toolkit's arch strings (reference/ai-toolkit.md §0), in its order.
    static const std::vector<ArchName> kArchs = {
        {"sd1", true},
        {"sd2", false},
        {"sd3", false},
        {"sdxl", true},
        {"pixart", false},
        {"pixart_sigma", false},
        {"auraflow", false},
        {"flux", true},
        {"flex1", false},
        {"flex2", false},
        {"lumina2", false},
        {"vega", false},
        {"ssd", false},
        {"wan21", true, /*video=*/true},
        {"wan21_i2v", false},
        {"wan22_14b", false},
        {"wan22_14b_i2v", false},
        {"wan22_5b", false},
        {"cogview4", false},
        {"chroma", false},
        {"chroma_radiance", false},
        {"hidream", false},
        {"hidream_e1", false},
        {"hidream_o1", false},
        {"flux_kontext", false},
        {"flux2", false},
        {"flux2_klein_4b", false},
        {"flux2_klein_9b", false},
        {"qwen_image", false},
        {"qwen_image_edit", false},
        {"qwen_image_edit_plus", false},
        {"omnigen2", false},
        {"f-lite", false},
        {"zimage", false},
        {"zimage_l2p", false},
        {"ltx2", false},
        {"ltx2.3", false},
        {"ltx2.5", false},
        {"zeta_chroma", false},
        {"ernie_image", false},
        {"nucleus_image", false},
        {"anima", false},
        {"ideogram4", false},
        {"prx_pixel", false},
        {"krea2", false},
        {"boogu_image", false},
        {"boogu_image_edit", false},
        {"mageflow", false},
        {"mageflow_edit", false},
        {"minimax_h3", false},
        {"minimax_h3_ref2va", false},
        {"ace_step_15", false},
        {"ace_step_15_xl", false},
    };
    return kArchs;
}

const ArchName* find_arch(std::string_view name) {
    for (const ArchName& a : known_archs()) {
        if (name == a.name) return &a;
    }
    return nullptr;
}

std::string trainable_arch_list() {
    std::string out;
    for (const ArchName& a : known_archs()) {
        if (!a.trainable) continue;
        if (!out.empty()) out += ", ";
        out += a.name;
    }
    return out;
}

}  // namespace loom::config
