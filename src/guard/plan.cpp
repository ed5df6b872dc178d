#include "loom/guard/plan.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "loom/core/error.h"
#include "loom/io/atomic_file.h"

namespace loom::guard {

namespace {

const char* bool_text(bool b) {
    return b ? "true" : "false";
}

// "64x64" for a square pixel cap, else the pixel count.
std::string cap_text(const std::optional<std::int64_t>& cap) {
    if (!cap) return "all";
    const auto side = static_cast<std::int64_t>(std::llround(std::sqrt(double(*cap))));
    if (side * side == *cap) return std::to_string(side) + "x" + std::to_string(side) + " px";
    return std::to_string(*cap) + " px";
}

}  // namespace

Plan plan_from_job(const config::ProcessConfig& process) {
    Plan p;
    p.gradient_checkpointing = process.train.gradient_checkpointing;
    // The trainer uses one batch size for all datasets: the first dataset's (see prepare_data).
    p.batch_size = process.datasets.empty()
                       ? process.train.batch_size
                       : process.datasets.front().batch_size.value_or(process.train.batch_size);
    p.gradient_accumulation = std::max(1, process.train.gradient_accumulation);
    for (const auto& d : process.datasets) p.frames = std::max(p.frames, d.num_frames);
    // low_vram: true starts at the first sub-mode (encoders on the host); quantize: true maps
    // to bf16 base weights (level 2) until loom quantizes for real.
    p.low_vram = std::max(process.model.quantize   ? 2
                          : process.model.low_vram ? 1
                                                   : 0,
                          process.oom.low_vram_level);
    p.max_bucket_pixels = process.oom.max_bucket_pixels;
    p.host.memory_caches = process.oom.host_memory_caches;
    p.host.threads = process.oom.host_threads;
    const config::SampleConfig& s = process.sample;
    p.sample.enabled =
        !process.train.disable_sampling && (!s.prompts.empty() || !s.samples.empty());
    p.sample.width = s.width;
    p.sample.height = s.height;
    for (const auto& item : s.samples) {
        p.sample.width = std::max(p.sample.width, item.width.value_or(0));
        p.sample.height = std::max(p.sample.height, item.height.value_or(0));
    }
    p.sample.frames = s.num_frames;
    p.sample.batch_prompts = process.oom.sample_batch_prompts;
    p.sample.batch_guidance = process.oom.sample_batch_guidance;
    return p;
}

std::string describe(const Plan& p) {
    std::ostringstream out;
    out << "gradient_checkpointing " << bool_text(p.gradient_checkpointing) << ", batch "
        << p.batch_size << " x " << p.gradient_accumulation << " accumulation, buckets "
        << cap_text(p.max_bucket_pixels);
    if (p.frames > 1) out << ", frames " << p.frames;
    out << ", low_vram " << p.low_vram << ", sampling ";
    if (!p.sample.enabled) {
        out << "off";
    } else {
        out << p.sample.width << "x" << p.sample.height
            << (p.sample.batch_prompts ? " batched" : " one prompt at a time")
            << (p.sample.batch_guidance ? "" : ", sequential guidance");
        if (p.sample.frames > 1) out << ", " << p.sample.frames << " frames";
    }
    if (!p.host.memory_caches) out << ", caches on disk";
    if (p.host.threads > 0) out << ", CPU threads " << p.host.threads;
    return out.str();
}

std::vector<KnobChange> diff(const Plan& a, const Plan& b) {
    std::vector<KnobChange> out;
    const auto add = [&](const char* knob, const std::string& from, const std::string& to) {
        if (from != to) out.push_back({knob, from, to});
    };
    const auto cap = [](const std::optional<std::int64_t>& c) {
        return c ? std::to_string(*c) : std::string("none");
    };
    add("train.gradient_checkpointing", bool_text(a.gradient_checkpointing),
        bool_text(b.gradient_checkpointing));
    add("train.batch_size", std::to_string(a.batch_size), std::to_string(b.batch_size));
    add("train.gradient_accumulation", std::to_string(a.gradient_accumulation),
        std::to_string(b.gradient_accumulation));
    add("datasets.max_bucket_pixels", cap(a.max_bucket_pixels), cap(b.max_bucket_pixels));
    add("datasets.num_frames", std::to_string(a.frames), std::to_string(b.frames));
    add("model.low_vram", std::to_string(a.low_vram), std::to_string(b.low_vram));
    add("sample.enabled", bool_text(a.sample.enabled), bool_text(b.sample.enabled));
    add("sample.width", std::to_string(a.sample.width), std::to_string(b.sample.width));
    add("sample.height", std::to_string(a.sample.height), std::to_string(b.sample.height));
    add("sample.batch_prompts", bool_text(a.sample.batch_prompts),
        bool_text(b.sample.batch_prompts));
    add("sample.batch_guidance", bool_text(a.sample.batch_guidance),
        bool_text(b.sample.batch_guidance));
    add("sample.num_frames", std::to_string(a.sample.frames), std::to_string(b.sample.frames));
    add("host.memory_caches", bool_text(a.host.memory_caches), bool_text(b.host.memory_caches));
    add("host.threads", std::to_string(a.host.threads), std::to_string(b.host.threads));
    return out;
}

Plan undo_change(const Plan& current, const Plan& before, const Plan& after) {
    Plan p = current;
    const auto restore = [](auto& field, const auto& was, const auto& changed_to) {
        if (was != changed_to) field = was;
    };
    restore(p.gradient_checkpointing, before.gradient_checkpointing, after.gradient_checkpointing);
    if (before.batch_size != after.batch_size ||
        before.gradient_accumulation != after.gradient_accumulation) {
        // Batch and accumulation move together, keeping the effective batch.
        p.batch_size = before.batch_size;
        p.gradient_accumulation = before.gradient_accumulation;
    }
    restore(p.max_bucket_pixels, before.max_bucket_pixels, after.max_bucket_pixels);
    restore(p.frames, before.frames, after.frames);
    restore(p.low_vram, before.low_vram, after.low_vram);
    restore(p.sample.enabled, before.sample.enabled, after.sample.enabled);
    restore(p.sample.width, before.sample.width, after.sample.width);
    restore(p.sample.height, before.sample.height, after.sample.height);
    restore(p.sample.batch_prompts, before.sample.batch_prompts, after.sample.batch_prompts);
    restore(p.sample.batch_guidance, before.sample.batch_guidance, after.sample.batch_guidance);
    restore(p.sample.frames, before.sample.frames, after.sample.frames);
    restore(p.host.memory_caches, before.host.memory_caches, after.host.memory_caches);
    restore(p.host.threads, before.host.threads, after.host.threads);
    return p;
}

std::string plan_to_yaml(const Plan& p) {
    YAML::Emitter out;
    out << YAML::BeginMap;
    out << YAML::Key << "train" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "gradient_checkpointing" << YAML::Value << p.gradient_checkpointing;
    out << YAML::Key << "batch_size" << YAML::Value << p.batch_size;
    out << YAML::Key << "gradient_accumulation" << YAML::Value << p.gradient_accumulation;
    out << YAML::EndMap;
    out << YAML::Key << "datasets" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "max_bucket_pixels" << YAML::Value;
    if (p.max_bucket_pixels) {
        out << *p.max_bucket_pixels;
    } else {
        out << YAML::Null;
    }
    out << YAML::Key << "num_frames" << YAML::Value << p.frames;
    out << YAML::EndMap;
    out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "low_vram" << YAML::Value << p.low_vram;
    out << YAML::EndMap;
    out << YAML::Key << "sample" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "enabled" << YAML::Value << p.sample.enabled;
    out << YAML::Key << "width" << YAML::Value << p.sample.width;
    out << YAML::Key << "height" << YAML::Value << p.sample.height;
    out << YAML::Key << "batch_prompts" << YAML::Value << p.sample.batch_prompts;
    out << YAML::Key << "batch_guidance" << YAML::Value << p.sample.batch_guidance;
    out << YAML::Key << "num_frames" << YAML::Value << p.sample.frames;
    out << YAML::EndMap;
    out << YAML::Key << "host" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "memory_caches" << YAML::Value << p.host.memory_caches;
    out << YAML::Key << "threads" << YAML::Value << p.host.threads;
    out << YAML::EndMap;
    out << YAML::EndMap;
    return "# loom plan: the memory settings this run uses; rewritten on every change.\n"
           "# Delete this file (or train with --fresh) to start from the job's own settings.\n" +
           std::string(out.c_str()) + "\n";
}

namespace {

// Reads a map of known keys; every key must be known and every known key present.
class PlanReader {
  public:
    explicit PlanReader(std::string source) : source_(std::move(source)) {}

    YAML::Node section(const YAML::Node& root, const std::string& name,
                       const std::vector<std::string>& keys) {
        const YAML::Node node = root[name];
        if (!node || !node.IsMap()) fail(name, "is missing or not a mapping");
        for (const auto& kv : node) {
            const std::string key = kv.first.as<std::string>();
            if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
                fail(name + "." + key, "is not a plan key");
            }
        }
        return node;
    }

    template <class T>
    T get(const YAML::Node& section, const std::string& path, const std::string& key) {
        const YAML::Node n = section[key];
        if (!n) fail(path + "." + key, "is missing");
        try {
            return n.as<T>();
        } catch (const YAML::Exception&) {
            fail(path + "." + key, "has a malformed value '" + n.Scalar() + "'");
        }
    }

    int positive(const YAML::Node& section, const std::string& path, const std::string& key) {
        const int v = get<int>(section, path, key);
        if (v < 1) fail(path + "." + key, "must be at least 1, not " + std::to_string(v));
        return v;
    }

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw FormatError(source_, key + " " + what +
                                       "; delete the file (or train with --fresh) to start "
                                       "from the job's own settings");
    }

  private:
    std::string source_;
};

}  // namespace

Plan parse_plan(const std::string& text, const std::string& source) {
    PlanReader r(source);
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        throw FormatError(source, "is not valid YAML (" + e.msg + " at line " +
                                      std::to_string(e.mark.line + 1) +
                                      "); delete it to start from the job's own settings");
    }
    if (!root.IsMap()) r.fail("the top level", "is not a mapping");
    Plan p;
    const YAML::Node train =
        r.section(root, "train", {"gradient_checkpointing", "batch_size", "gradient_accumulation"});
    p.gradient_checkpointing = r.get<bool>(train, "train", "gradient_checkpointing");
    p.batch_size = r.positive(train, "train", "batch_size");
    p.gradient_accumulation = r.positive(train, "train", "gradient_accumulation");
    const YAML::Node data = r.section(root, "datasets", {"max_bucket_pixels", "num_frames"});
    if (!data["max_bucket_pixels"]) r.fail("datasets.max_bucket_pixels", "is missing");
    if (!data["max_bucket_pixels"].IsNull()) {
        p.max_bucket_pixels = r.get<std::int64_t>(data, "datasets", "max_bucket_pixels");
        if (*p.max_bucket_pixels < 1) r.fail("datasets.max_bucket_pixels", "must be positive");
    }
    p.frames = r.positive(data, "datasets", "num_frames");
    const YAML::Node model = r.section(root, "model", {"low_vram"});
    p.low_vram = r.get<int>(model, "model", "low_vram");
    if (p.low_vram < 0) r.fail("model.low_vram", "must not be negative");
    const YAML::Node s =
        r.section(root, "sample",
                  {"enabled", "width", "height", "batch_prompts", "batch_guidance", "num_frames"});
    p.sample.enabled = r.get<bool>(s, "sample", "enabled");
    p.sample.width = r.positive(s, "sample", "width");
    p.sample.height = r.positive(s, "sample", "height");
    p.sample.batch_prompts = r.get<bool>(s, "sample", "batch_prompts");
    p.sample.batch_guidance = r.get<bool>(s, "sample", "batch_guidance");
    p.sample.frames = r.positive(s, "sample", "num_frames");
    // Plans written before the host knobs existed have no host section: the defaults.
    if (root["host"]) {
        const YAML::Node h = r.section(root, "host", {"memory_caches", "threads"});
        p.host.memory_caches = r.get<bool>(h, "host", "memory_caches");
        p.host.threads = r.get<int>(h, "host", "threads");
        if (p.host.threads < 0) r.fail("host.threads", "must not be negative");
    }
    for (const auto& kv : root) {
        const std::string key = kv.first.as<std::string>();
        if (key != "train" && key != "datasets" && key != "model" && key != "sample" &&
            key != "host") {
            r.fail(key, "is not a plan section");
        }
    }
    return p;
}

void save_plan(const std::filesystem::path& file, const Plan& plan) {
    write_file_atomic(file, plan_to_yaml(plan));
}

Plan load_plan(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw IoError(file.string(), "cannot be read");
    std::ostringstream text;
    text << in.rdbuf();
    return parse_plan(text.str(), file.string());
}

}  // namespace loom::guard
