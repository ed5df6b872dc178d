#include "loom/model/wan/wan_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/tokenizers/unicode_tables.h"
#include "tokenizers/clip_tokenizer_text.h"
#include "tokenizers/utf8_walk.h"

namespace loom {

namespace {

// One pass of html.unescape over the entities a caption uses; anything else is left as written.
std::string unescape_html(const std::string& text) {
    static const std::pair<const char*, const char*> kNamed[] = {
        {"amp;", "&"},   {"lt;", "<"},   {"gt;", ">"},
        {"quot;", "\""}, {"apos;", "'"}, {"nbsp;", "\xC2\xA0"}};
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
        if (text[i] != '&') {
            out.push_back(text[i++]);
            continue;
        }
        bool replaced = false;
        for (const auto& [name, value] : kNamed) {
            if (text.compare(i + 1, std::char_traits<char>::length(name), name) == 0) {
                out += value;
                i += 1 + std::char_traits<char>::length(name);
                replaced = true;
                break;
            }
        }
        if (!replaced && i + 2 < text.size() && text[i + 1] == '#') {
            const bool hex = text[i + 2] == 'x' || text[i + 2] == 'X';
            const std::size_t digits = i + (hex ? 3 : 2);
            std::size_t end = digits;
            while (end < text.size() &&
                   (hex ? std::isxdigit(static_cast<unsigned char>(text[end]))
                        : std::isdigit(static_cast<unsigned char>(text[end])))) {
                ++end;
            }
            if (end > digits && end - digits <= 7) {
                const unsigned long code =
                    std::strtoul(text.substr(digits, end - digits).c_str(), nullptr, hex ? 16 : 10);
                if (code > 0 && code <= 0x10FFFF && (code < 0xD800 || code > 0xDFFF)) {
                    clip_tokenizer_detail::append_utf8(static_cast<char32_t>(code), out);
                    i = end + (end < text.size() && text[end] == ';' ? 1 : 0);
                    replaced = true;
                }
            }
        }
        if (!replaced) out.push_back(text[i++]);
    }
    return out;
}

// Python's \s: Unicode whitespace and the separators U+001C..U+001F.
bool is_python_space(char32_t c) {
    return unicode::is_whitespace(c) || (c >= 0x1C && c <= 0x1F);
}

}  // namespace

std::string wan_prompt_clean(const std::string& text) {
    const std::string unescaped = unescape_html(unescape_html(text));
    std::string out;
    bool space = false;
    for (std::size_t pos = 0; pos < unescaped.size();) {
        const std::size_t length =
            std::min(utf8_walk::length_at(unescaped, pos), unescaped.size() - pos);
        if (is_python_space(utf8_walk::decode(unescaped, pos, length))) {
            space = !out.empty();
        } else {
            if (space) out.push_back(' ');
            space = false;
            out.append(unescaped, pos, length);
        }
        pos += length;
    }
    return out;
}

namespace {

// Wan's released folders ship UniPCMultistepScheduler; loom samples with flow-matching Euler as
// ai-toolkit's previews do, and says so rather than silently sample otherwise than the folder.
void say_scheduler_used(const DiffusersFolder& folder) {
    if (!folder.has("scheduler")) return;
    const std::filesystem::path path = folder.dir("scheduler") / "scheduler_config.json";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return;
    const std::string cls = ConfigReader(path).text("_class_name", "");
    if (cls.empty() || cls == "FlowMatchEulerDiscreteScheduler") return;
    logger("model").info(
        "{}: the folder's scheduler is {}; loom's previews and `loom sample` denoise with the "
        "flow-matching Euler sampler at shift {:g} instead, as ai-toolkit's previews do "
        "(training is the same either way)",
        path.string(), cls, WanModel::kShift);
}

}  // namespace

bool is_wan_pipeline(const DiffusersFolder& folder) {
    return folder.pipeline_class == "WanPipeline";
}

WanTransformer3DModel load_wan_transformer(const DiffusersFolder& folder,
                                           const std::string& component, at::ScalarType dtype) {
    return load_component(
        WanTransformer3DModel(read_wan_config(folder.dir(component) / "config.json")),
        folder.dir(component), dtype, component);
}

WanModel load_wan_components(DiffusersFolder folder, const WanLoadOptions& o) {
    WanModel wan;
    wan.folder = std::move(folder);
    std::vector<std::string> needed = {"transformer"};
    if (o.load_vae) needed.push_back("vae");
    if (o.load_text_encoder) needed.insert(needed.end(), {"text_encoder", "tokenizer"});
    wan.folder.require(needed);
    wan.scheduler.shift = WanModel::kShift;
    wan.scheduler.use_dynamic_shifting = false;
    say_scheduler_used(wan.folder);
    wan.transformer = load_wan_transformer(wan.folder, "transformer", o.dtype);
    if (o.load_vae) wan.vae = load_wan_vae(wan.folder.dir("vae"), o.dtype);
    if (o.load_text_encoder) {
        wan.tokenizer =
            std::make_shared<T5Tokenizer>(T5Tokenizer::from_folder(wan.folder.dir("tokenizer")));
        wan.text_encoder = load_t5_encoder(wan.folder, "text_encoder", o.dtype);
    }
    return wan;
}

WanModel load_wan(const std::filesystem::path& root, const WanLoadOptions& o) {
    DiffusersFolder folder = read_diffusers_folder(root);
    const std::filesystem::path index = root / "model_index.json";
    if (!is_wan_pipeline(folder)) {
        throw FormatError(index.string(),
                          "pipeline class '" + folder.pipeline_class + "' is not WanPipeline");
    }
    if (folder.has("transformer_2")) {
        throw FormatError(index.string(),
                          "has a 'transformer_2': Wan 2.2's two-expert (high- and low-noise) "
                          "layout, which is arch wan22_14b, not Wan 2.1");
    }
    return load_wan_components(std::move(folder), o);
}

std::vector<torch::nn::Module*> WanModel::encoders() {
    std::vector<torch::nn::Module*> out;
    if (vae) out.push_back(vae.get());
    if (text_encoder) out.push_back(text_encoder.get());
    return out;
}

LatentDistribution WanModel::encode_pixels(const at::Tensor& pixels) {
    if (pixels.dim() == 4) return vae->encode(pixels.unsqueeze(2));  // a one-frame clip
    return vae->encode(pixels);
}

at::ScalarType WanModel::vae_dtype() const {
    return vae->parameters().front().scalar_type();
}

TextConditioning WanModel::encode_prompts(const std::vector<std::string>& prompts,
                                          std::size_t max_sequence_length) {
    TORCH_CHECK(text_encoder && tokenizer, "the Wan text encoder was not loaded");
    const auto batch = static_cast<int64_t>(prompts.size());
    const auto width = static_cast<int64_t>(max_sequence_length);
    std::vector<int64_t> ids;
    std::vector<int64_t> mask;
    std::vector<int64_t> lengths;
    for (const std::string& p : prompts) {
        const std::string clean = wan_prompt_clean(p);
        const auto encoded = tokenizer->encode(clean, max_sequence_length);
        ids.insert(ids.end(), encoded.begin(), encoded.end());
        // The tokens and "</s>", as many as fit: the mask's ones.
        const int64_t length =
            std::min<int64_t>(static_cast<int64_t>(tokenizer->tokenize(clean).size()) + 1, width);
        lengths.push_back(length);
        for (int64_t i = 0; i < width; ++i) mask.push_back(i < length ? 1 : 0);
    }
    const at::Device device = text_encoder->parameters().front().device();
    const at::Tensor hidden =
        text_encoder->forward(at::tensor(ids, at::kLong).view({batch, width}).to(device),
                              at::tensor(mask, at::kLong).view({batch, width}).to(device));
    // Each prompt's own tokens, then zeros: the padding's outputs are dropped, not masked.
    const at::Tensor keep =
        (at::arange(width, at::TensorOptions().dtype(at::kLong)).view({1, width}) <
         at::tensor(lengths, at::kLong).view({batch, 1}))
            .to(device)
            .unsqueeze(-1);
    TextConditioning out;
    out.context = at::where(keep, hidden, at::zeros({}, hidden.options()));
    return out;
}

}  // namespace loom
