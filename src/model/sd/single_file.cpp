#include "loom/model/sd/single_file.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <optional>

#include "ldm_checkpoint.h"
#include "loom/core/error.h"
#include "loom/io/safetensors.h"
#include "loom/model/loading/weight_files.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// How a single file's load errors name the configs (read from its shapes, not a config.json).
constexpr const char* kInferred = "config (inferred from the file's shapes)";

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

// Refuses what is not a .safetensors file, saying what to do with it.
void check_extension(const fs::path& file) {
    const std::string ext = lower(file.extension().string());
    if (ext == ".safetensors") return;
    if (ext == ".ckpt" || ext == ".pt" || ext == ".pth" || ext == ".bin") {
        throw FormatError(file.string(),
                          "is a pickle checkpoint, which loom does not load (unpickling can run "
                          "code); use the model's .safetensors file, or convert it once with "
                          "diffusers (from_single_file, then save_pretrained) and give "
                          "model.name_or_path the folder");
    }
    throw FormatError(file.string(),
                      "is neither a .safetensors single-file checkpoint nor a diffusers folder "
                      "(model.name_or_path)");
}

std::shared_ptr<const SafetensorsFile> open_checkpoint(const fs::path& file) {
    check_extension(file);
    return std::make_shared<const SafetensorsFile>(SafetensorsFile::open(file));
}

bool has_tokenizers(const fs::path& snapshot, config::Arch arch) {
    if (!fs::is_directory(snapshot / "tokenizer")) return false;
    return !config::arch_info(arch).two_text_encoders || fs::is_directory(snapshot / "tokenizer_2");
}

// The cached snapshot of the first default repo that holds the tokenizer(s), if any.
std::optional<fs::path> config_snapshot(config::Arch arch, const EnvironmentLookup& env) {
    for (const std::string& repo : single_file_config_repos(arch)) {
        try {
            const fs::path snapshot = locate_model(repo, env);
            if (has_tokenizers(snapshot, arch)) return snapshot;
        } catch (const IoError&) {
            // Not in the cache: try the next repo, then say what to download.
        }
    }
    return std::nullopt;
}

[[noreturn]] void throw_missing_tokenizer(const fs::path& file, config::Arch arch,
                                          const EnvironmentLookup& env) {
    const std::string& repo = single_file_config_repos(arch).front();
    std::string caches;
    for (const fs::path& cache : hub_cache_folders(env)) {
        caches += (caches.empty() ? "" : ", ") + cache.string();
    }
    if (caches.empty()) caches = "no cache: HF_HOME and HOME are unset";
    const std::string folders = config::arch_info(arch).two_text_encoders
                                    ? "'tokenizer/*' 'tokenizer_2/*' 'scheduler/*'"
                                    : "'tokenizer/*' 'scheduler/*'";
    throw IoError(file.string(),
                  std::string("is a single-file ") + config::to_string(arch) +
                      " checkpoint without its tokenizer, which loom reads (as diffusers does) "
                      "from " +
                      repo + " in the local Hugging Face cache, and the cache does not hold it (" +
                      caches + "); loom downloads nothing: run `huggingface-cli download " + repo +
                      " --include " + folders +
                      "` (a few MB), or give model.name_or_path a "
                      "diffusers folder");
}

}  // namespace

bool is_single_file_checkpoint(const fs::path& path) {
    std::error_code ec;
    return fs::is_regular_file(path, ec);
}

const std::vector<std::string>& single_file_config_repos(config::Arch arch) {
    // diffusers' defaults for from_single_file (single_file_utils.py DIFFUSERS_DEFAULT_PIPELINE
    // _PATHS), and the SD 1.5 repo's former name.
    static const std::vector<std::string> kSd1 = {"stable-diffusion-v1-5/stable-diffusion-v1-5",
                                                  "runwayml/stable-diffusion-v1-5"};
    static const std::vector<std::string> kSd2 = {"stabilityai/stable-diffusion-2-1"};
    static const std::vector<std::string> kSdxl = {"stabilityai/stable-diffusion-xl-base-1.0"};
    switch (arch) {
        case config::Arch::kSdxl: return kSdxl;
        case config::Arch::kSd2: return kSd2;
        default: return kSd1;
    }
}

config::Arch detect_single_file_arch(const fs::path& file) {
    return ldm::detect_arch(*open_checkpoint(file));
}

StableDiffusion load_stable_diffusion_single_file(const fs::path& file, const LoadOptions& o,
                                                  const EnvironmentLookup& env) {
    const auto checkpoint = open_checkpoint(file);
    const std::string where = file.string();
    StableDiffusion sd;
    sd.arch = ldm::detect_arch(*checkpoint);
    if (sd.arch == config::Arch::kSd2) {
        throw FormatError(where,
                          "is a Stable Diffusion 2.x checkpoint; loom loads SD 1.x and SDXL "
                          "single files (and trains sd1, sdxl and flux)");
    }
    const config::ArchInfo& info = config::arch_info(sd.arch);
    const bool xl = info.two_text_encoders;
    sd.folder.root = file;
    sd.folder.pipeline_class = info.pipeline_class;
    sd.folder.components = {{"unet", "diffusers", "UNet2DConditionModel"},
                            {"vae", "diffusers", "AutoencoderKL"},
                            {"text_encoder", "transformers", "CLIPTextModel"},
                            {"tokenizer", "transformers", "CLIPTokenizer"},
                            {"scheduler", "diffusers", "DDIMScheduler"}};
    if (xl) {
        sd.folder.components.push_back(
            {"text_encoder_2", "transformers", "CLIPTextModelWithProjection"});
        sd.folder.components.push_back({"tokenizer_2", "transformers", "CLIPTokenizer"});
    }

    const std::optional<fs::path> snapshot = config_snapshot(sd.arch, env);
    if (o.load_text_encoders && !snapshot) throw_missing_tokenizer(file, sd.arch, env);
    const fs::path scheduler_json =
        snapshot ? *snapshot / "scheduler" / "scheduler_config.json" : fs::path();
    if (snapshot && fs::exists(scheduler_json)) {
        sd.scheduler = read_scheduler_config(scheduler_json);
    }

    // SDXL's UNet config needs the pooled width, the second text encoder's projection.
    std::optional<CLIPTextConfig> open_clip;
    if (xl) open_clip = ldm::open_clip_config(*checkpoint, ldm::kOpenClipSdxl);
    const UNetConfig unet_config =
        ldm::unet_config(*checkpoint, sd.arch, open_clip ? open_clip->projection_dim : 0);
    sd.unet = UNet2DConditionModel(unet_config);
    sd.unet->to(o.dtype);
    load_stored_tensors(*sd.unet, ldm::unet_sources(checkpoint, unet_config), "unet", where,
                        kInferred);
    sd.unet->eval();

    if (o.load_vae) {
        const VAEConfig vae_config = ldm::vae_config(*checkpoint, sd.arch);
        sd.vae = AutoencoderKL(vae_config);
        sd.vae->to(o.dtype);
        load_stored_tensors(*sd.vae, ldm::vae_sources(checkpoint, vae_config), "vae", where,
                            kInferred);
        sd.vae->eval();
    }
    if (o.load_text_encoders) {
        const std::string clip_prefix = xl ? ldm::kClipSdxl : ldm::kClipSd1;
        sd.text_encoder = CLIPTextModel(ldm::clip_config(*checkpoint, clip_prefix));
        sd.text_encoder->to(o.dtype);
        load_stored_tensors(*sd.text_encoder, ldm::clip_sources(checkpoint, clip_prefix),
                            "text_encoder", where, kInferred, "text_model.");
        sd.text_encoder->eval();
        sd.tokenizer =
            std::make_shared<CLIPTokenizer>(CLIPTokenizer::from_folder(*snapshot / "tokenizer"));
        if (xl) {
            sd.text_encoder_2 = CLIPTextModel(*open_clip);
            sd.text_encoder_2->to(o.dtype);
            load_stored_tensors(*sd.text_encoder_2,
                                ldm::open_clip_sources(checkpoint, ldm::kOpenClipSdxl),
                                "text_encoder_2", where, kInferred);
            sd.text_encoder_2->eval();
            sd.tokenizer_2 = std::make_shared<CLIPTokenizer>(
                CLIPTokenizer::from_folder(*snapshot / "tokenizer_2"));
        }
    }
    return sd;
}

}  // namespace loom
