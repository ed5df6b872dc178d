#include "loom/model/qwenimage/qwenimage_family.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/flux/flux_transformer.h"
#include "loom/model/qwenimage/qwenimage_preview_sampler.h"
#include "loom/model/vae/autoencoder_kl.h"

namespace loom {

std::unique_ptr<ModelFamily> QwenImageFamily::load(const std::filesystem::path& root,
                                                   config::Arch arch,
                                                   const FamilyLoadOptions& options) {
    QwenImageLoadOptions o;
    o.dtype = options.dtype;
    QwenImageModel model = load_qwenimage(root, o);
    const config::ArchInfo& info = config::arch_info(arch);
    if (std::string(info.pipeline_class) != model.folder.pipeline_class) {
        throw FormatError((root / "model_index.json").string(),
                          "is a " + model.folder.pipeline_class + " folder, but model.arch '" +
                              info.name + "' loads a " + info.pipeline_class +
                              ": set model.arch to the folder's arch, or point name_or_path at a " +
                              info.display_name + " folder");
    }
    return std::make_unique<QwenImageFamily>(std::move(model), arch, options.match_target_res);
}

std::vector<torch::nn::Module*> QwenImageFamily::encoders() {
    std::vector<torch::nn::Module*> out;
    if (model_.vae) out.push_back(model_.vae.get());
    if (model_.text_encoder) out.push_back(model_.text_encoder.get());
    if (model_.vision) out.push_back(model_.vision.get());
    return out;
}

// ai-toolkit's get_transformer_block_names: every Linear of the dual-stream blocks.
const DenoiserBlocks& QwenImageFamily::declared_blocks() {
    static const DenoiserBlocks blocks{{"transformer_blocks."},
                                       LoRATargeting::kBlockLinears,
                                       /*experts=*/{}};
    return blocks;
}

void QwenImageFamily::set_gradient_checkpointing(bool on) {
    model_.transformer->set_gradient_checkpointing(on);
}

void QwenImageFamily::set_channels_last(bool) {
    // The Wan VAE's convolutions are 3D: channels-last does not apply.
}

LatentDistribution QwenImageFamily::encode_pixels(const at::Tensor& pixels) {
    // An image is a one-frame clip, as QwenImagePipeline encodes it; the frame axis goes again.
    const LatentDistribution clip = model_.vae->encode(pixels.unsqueeze(2));
    return {clip.mean.squeeze(2), clip.logvar.squeeze(2)};
}

at::Tensor QwenImageFamily::training_latents(const at::Tensor& z) const {
    // ai-toolkit's encode_images: (z - latents_mean) * (1 / latents_std).
    return model_.vae->normalize_latents(z.unsqueeze(2)).squeeze(2);
}

at::ScalarType QwenImageFamily::vae_dtype() {
    return model_.vae->parameters().front().scalar_type();
}

TextConditioning QwenImageFamily::encode_prompts(const std::vector<std::string>& prompts) {
    return model_.encode_prompts(prompts, kMaxSequenceLength);
}

TextConditioning QwenImageFamily::encode_prompts_with_controls(
    const std::vector<std::string>& prompts, const std::vector<std::vector<at::Tensor>>& controls) {
    return model_.encode_edit_prompts(prompts, controls);
}

std::pair<int64_t, int64_t> QwenImageFamily::control_size(int64_t control_width,
                                                          int64_t control_height,
                                                          int64_t target_width,
                                                          int64_t target_height) const {
    if (model_.variant != QwenImageVariant::kEditPlus) return {target_width, target_height};
    // ai-toolkit's get_noise_prediction: VAE_IMAGE_SIZE, or the target's area, at the
    // control's own aspect, in multiples of 32.
    const int64_t area = match_target_res_ ? target_width * target_height : kQwenEditVaeArea;
    return qwen_edit_dimensions(area, static_cast<double>(control_width) / control_height);
}

at::Tensor QwenImageFamily::extra_conditioning(int64_t, int64_t, int64_t) const {
    return {};
}

NoiseScheduleConfig QwenImageFamily::ddpm_schedule() const {
    throw Error(std::string("model '") + config::arch_info(arch_).name +
                "' trains with flow matching; it has no DDPM schedule");
}

at::Tensor QwenImageFamily::predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                                    const StepConditioning& c) {
    const int64_t height = noisy.size(2);
    const int64_t width = noisy.size(3);
    QwenImageInputs in;
    in.encoder_hidden_states = c.context;
    if (c.context_mask.defined()) in.encoder_hidden_states_mask = c.context_mask;
    // ai-toolkit: timestep / 1000, scaled back inside.
    in.timestep = timesteps.to(at::kFloat) / 1000;
    in.height = height / 2;
    in.width = width / 2;
    // The Edit archs' control latents after the target's on the sequence (img_shapes).
    std::vector<at::Tensor> sequence = {flux_pack_latents(noisy)};
    std::vector<at::Tensor> controls = c.controls;
    if (c.control.defined()) controls.insert(controls.begin(), c.control);
    for (const at::Tensor& control : controls) {
        sequence.push_back(flux_pack_latents(control.to(noisy.scalar_type())));
        in.control_grids.emplace_back(control.size(2) / 2, control.size(3) / 2);
    }
    in.hidden_states = sequence.size() == 1 ? sequence.front() : at::cat(sequence, 1);
    const at::Tensor out = model_.transformer->forward(in);
    const int64_t tokens = in.height * in.width;
    return flux_unpack_latents(controls.empty() ? out : out.narrow(1, 0, tokens), height, width);
}

std::vector<at::Tensor> QwenImageFamily::sample(const std::vector<PreviewRequest>& requests,
                                                const PreviewOptions& options,
                                                const at::Device& device) {
    return generate_qwenimage_previews(
        model_, requests, options, device,
        options.max_sequence_length ? options.max_sequence_length : kMaxSequenceLength);
}

}  // namespace loom
