#include "loom/model/sd/stable_diffusion.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/family.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/sd/single_file.h"

namespace loom {

TextConditioning StableDiffusion::encode_prompts(const std::vector<std::string>& prompts) {
    TORCH_CHECK(text_encoder && tokenizer, "the text encoder was not loaded");
    const at::Device device = text_encoder->parameters().front().device();
    auto ids_for = [&](const CLIPTokenizer& tok) {
        std::vector<int64_t> flat;
        for (const std::string& p : prompts) {
            const auto ids = tok.encode(p);
            flat.insert(flat.end(), ids.begin(), ids.end());
        }
        return at::tensor(flat, at::kLong)
            .view({static_cast<int64_t>(prompts.size()), -1})
            .to(device);
    };
    TextConditioning out;
    const CLIPTextOutput first = text_encoder->forward(ids_for(*tokenizer));
    if (!text_encoder_2) {
        out.context = first.last_hidden_state;
        return out;
    }
    const CLIPTextOutput second = text_encoder_2->forward(ids_for(*tokenizer_2));
    out.context = at::cat({first.penultimate_hidden_state, second.penultimate_hidden_state}, -1);
    out.text_embeds = second.text_embeds;
    return out;
}

at::Tensor StableDiffusion::time_ids(int64_t height, int64_t width, int64_t batch) {
    const at::Tensor one =
        at::tensor(std::vector<float>{static_cast<float>(height), static_cast<float>(width), 0.f,
                                      0.f, static_cast<float>(height), static_cast<float>(width)});
    return one.unsqueeze(0).repeat({batch, 1});
}

UNet2DConditionModel load_unet(const DiffusersFolder& folder, at::ScalarType dtype) {
    UNet2DConditionModel unet(read_unet_config(folder.dir("unet") / "config.json"));
    unet->to(dtype);
    load_weights(*unet, find_weight_files(folder.dir("unet")), "unet");
    unet->eval();
    return unet;
}

StableDiffusion load_stable_diffusion(const std::filesystem::path& root, const LoadOptions& o) {
    if (is_single_file_checkpoint(root)) return load_stable_diffusion_single_file(root, o);
    StableDiffusion sd;
    sd.folder = read_diffusers_folder(root);
    sd.arch = detect_arch(sd.folder);
    const config::ArchInfo& info = config::arch_info(sd.arch);
    if (info.family != config::FamilyKind::kStableDiffusion) {
        throw FormatError((root / "model_index.json").string(),
                          std::string("is a ") + info.display_name +
                              " pipeline, not Stable Diffusion: load it with load_model_family "
                              "(model/family.h)");
    }
    for (const char* needed : {"unet", "scheduler"}) {
        if (!sd.folder.has(needed)) {
            throw FormatError((root / "model_index.json").string(),
                              std::string("has no '") + needed + "' component");
        }
    }
    sd.unet = load_unet(sd.folder, o.dtype);
    sd.scheduler = read_scheduler_config(sd.folder.dir("scheduler") / "scheduler_config.json");
    if (o.load_vae) sd.vae = load_vae(sd.folder, o.dtype);
    if (o.load_text_encoders) {
        sd.tokenizer =
            std::make_shared<CLIPTokenizer>(CLIPTokenizer::from_folder(sd.folder.dir("tokenizer")));
        sd.text_encoder = load_text_encoder(sd.folder, "text_encoder", o.dtype);
        if (info.two_text_encoders) {
            sd.tokenizer_2 = std::make_shared<CLIPTokenizer>(
                CLIPTokenizer::from_folder(sd.folder.dir("tokenizer_2")));
            sd.text_encoder_2 = load_text_encoder(sd.folder, "text_encoder_2", o.dtype);
        }
    }
    return sd;
}

}  // namespace loom
