#include "loom/guard/plan.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <type_traits>
#include <utility>

#include "loom/config/arch.h"
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

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

// A knob's value as diff prints it.
std::string knob_text(bool b) {
    return bool_text(b);
}
std::string knob_text(int v) {
    return std::to_string(v);
}
std::string knob_text(const std::optional<std::int64_t>& cap) {
    return cap ? std::to_string(*cap) : std::string("none");
}
std::string knob_text(config::QType qtype) {
    return config::to_string(qtype);
}
std::string knob_text(const std::optional<config::QType>& qtype) {
    return qtype ? config::to_string(*qtype) : std::string("none");
}

// A knob's value as plan.yaml writes it: the qtypes by their names.
template <class T>
const T& yaml_value(const T& value) {
    return value;
}
const char* yaml_value(config::QType qtype) {
    return config::to_string(qtype);
}

// True when the knob's value is the same in `a` and `b`, which are Plans or, for the knobs they
// group, SamplePlans or HostPlans.
template <class G>
bool knobs_equal(const G& a, const G& b) {
    bool equal = true;
    for_each_knob([&](const Knob&, const auto& field) {
        using Field = std::decay_t<decltype(field)>;
        if constexpr (std::is_same_v<G, Plan> || std::is_same_v<typename Field::Group, G>) {
            equal = equal && field.of(a) == field.of(b);
        }
    });
    return equal;
}

// How many knobs of the list live directly in G (Plan) or in its group G (SamplePlan, HostPlan).
template <class G>
constexpr int knobs_in() {
    int n = 0;
    for_each_knob([&n](const Knob&, const auto& field) {
        if (std::is_same_v<typename std::decay_t<decltype(field)>::Group, G>) ++n;
    });
    return n;
}

// Every data member of the plan structs is in Plan::fields: a member added without its entry
// stops compiling here (the bindings name every member; Plan's last two are the groups).
[[maybe_unused]] void every_member_is_a_knob(const Plan& p) {
    [[maybe_unused]] const auto& [checkpointing, batch, accumulation, buckets, frames, low_vram,
                                  streamed_blocks, idle_expert, qtype, qtype_te, sample, host] = p;
    [[maybe_unused]] const auto& [enabled, width, height, prompts, guidance, sample_frames] =
        p.sample;
    [[maybe_unused]] const auto& [caches, threads] = p.host;
    static_assert(
        knobs_in<Plan>() == 12 - 2 && knobs_in<SamplePlan>() == 6 && knobs_in<HostPlan>() == 2,
        "every member of Plan, SamplePlan and HostPlan needs its entry in Plan::fields");
}

}  // namespace

bool SamplePlan::operator==(const SamplePlan& o) const {
    return knobs_equal(*this, o);
}

bool HostPlan::operator==(const HostPlan& o) const {
    return knobs_equal(*this, o);
}

bool Plan::operator==(const Plan& o) const {
    return knobs_equal(*this, o);
}

Plan plan_from_job(const config::ProcessConfig& process) {
    Plan p;
    // Knobs without an ai-toolkit key: loom's oom block states them.
    for_each_knob([&](const Knob&, const auto& field) {
        if (field.oom) field.of(p) = process.oom.*field.oom;
    });
    p.gradient_checkpointing = process.train.gradient_checkpointing;
    // The trainer uses one batch size for all datasets: the first dataset's (see prepare_data).
    p.batch_size = process.datasets.empty()
                       ? process.train.batch_size
                       : process.datasets.front().batch_size.value_or(process.train.batch_size);
    p.gradient_accumulation = std::max(1, process.train.gradient_accumulation);
    for (const auto& d : process.datasets) p.frames = std::max(p.frames, d.num_frames);
    // low_vram: true starts at the first sub-mode (encoders on the host); quantize: true at the
    // second (the base quantized in model.qtype). oom.low_vram_level may ask for more.
    p.low_vram = std::max(process.model.quantize ? 2 : process.model.low_vram ? 1 : 0, p.low_vram);
    // ai-toolkit's layer offloading streams layers from host memory: level 3 (which also holds
    // what stays resident quantized); its transformer percent becomes a count once the model's
    // blocks are known (Trainer::load).
    if (process.model.layer_offloading && process.model.layer_offloading_transformer_percent > 0) {
        p.low_vram = std::max(p.low_vram, 3);
    }
    // ai-toolkit's low_vram moves the Wan 2.2 expert that is not training to the CPU by hand.
    const bool experts = process.choices.arch &&
                         config::expert_count(config::arch_info(*process.choices.arch).family) > 1;
    p.idle_expert_on_host = p.idle_expert_on_host || (experts && process.model.low_vram);
    // The qtypes loom uses for the words written (config::choose_qtype; the job's load warned
    // about a word it replaces).
    p.qtype = config::choose_qtype(process.model.qtype).qtype;
    if (process.model.quantize_te.value_or(false)) {
        p.qtype_te = config::choose_qtype(process.model.qtype_te).qtype;
    }
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
    return p;
}

std::string describe(const Plan& p) {
    std::ostringstream out;
    out << "gradient_checkpointing " << bool_text(p.gradient_checkpointing) << ", batch "
        << p.batch_size << " x " << p.gradient_accumulation << " accumulation, buckets "
        << cap_text(p.max_bucket_pixels);
    if (p.frames > 1) out << ", frames " << p.frames;
    out << ", low_vram " << p.low_vram;
    // Level 2 is where the qtypes act; below it they would only be noise in the WARN lines.
    if (p.low_vram >= 2) {
        out << " (base " << config::to_string(p.qtype) << ", text encoders "
            << (p.qtype_te ? config::to_string(*p.qtype_te) : "bf16");
        if (p.low_vram >= 3) {
            out << ", "
                << (p.streamed_blocks == 0   ? std::string("every block")
                    : p.streamed_blocks == 1 ? std::string("1 block")
                                             : std::to_string(p.streamed_blocks) + " blocks")
                << " streamed";
        }
        out << ")";
    }
    if (p.idle_expert_on_host) out << ", idle expert on the host";
    out << ", sampling ";
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

std::string qtype_text(const Plan& p) {
    std::string text = config::to_string(p.qtype);
    if (p.qtype_te) text += std::string("-te-") + config::to_string(*p.qtype_te);
    return text;
}

std::vector<KnobChange> diff(const Plan& a, const Plan& b) {
    std::vector<KnobChange> out;
    for_each_knob([&](const Knob& knob, const auto& field) {
        std::string from = knob_text(field.of(a));
        std::string to = knob_text(field.of(b));
        if (from != to) out.push_back({knob.name(), std::move(from), std::move(to)});
    });
    return out;
}

Plan undo_change(const Plan& current, const Plan& before, const Plan& after) {
    // Batch and accumulation move together, keeping the effective batch.
    bool batch_moved = false;
    for_each_knob([&](const Knob& knob, const auto& field) {
        if (knob.effective_batch && field.of(before) != field.of(after)) batch_moved = true;
    });
    Plan p = current;
    for_each_knob([&](const Knob& knob, const auto& field) {
        const bool moved = knob.effective_batch ? batch_moved : field.of(before) != field.of(after);
        if (moved) field.of(p) = field.of(before);
    });
    return p;
}

std::string plan_to_yaml(const Plan& p) {
    YAML::Emitter out;
    out << YAML::BeginMap;
    const PlanSection* section = nullptr;
    for_each_knob([&](const Knob& knob, const auto& field) {
        if (knob.section != section) {
            if (section) out << YAML::EndMap;
            section = knob.section;
            out << YAML::Key << section->name << YAML::Value << YAML::BeginMap;
        }
        out << YAML::Key << knob.key << YAML::Value;
        const auto& value = field.of(p);
        if constexpr (IsOptional<std::decay_t<decltype(value)>>::value) {
            if (value) {
                out << yaml_value(*value);
            } else {
                out << YAML::Null;
            }
        } else {
            out << yaml_value(value);
        }
    });
    out << YAML::EndMap;  // the last section
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
        if constexpr (std::is_same_v<T, config::QType>) {
            const std::optional<config::QType> qtype =
                n.IsScalar() ? config::parse_qtype(n.Scalar()) : std::nullopt;
            if (!qtype) {
                fail(path + "." + key,
                     "has a malformed value '" + n.Scalar() + "' (a qtype: qfloat8, qint8, uint4)");
            }
            return *qtype;
        } else {
            try {
                return n.as<T>();
            } catch (const YAML::Exception&) {
                fail(path + "." + key, "has a malformed value '" + n.Scalar() + "'");
            }
        }
    }

    // The knob's value in its section, checked against its floor. An optional knob is null
    // when unset.
    template <class T>
    T read(const YAML::Node& section, const Knob& knob) {
        const std::string path = knob.section->name;
        if constexpr (IsOptional<T>::value) {
            if (!section[knob.key]) fail(knob.name(), "is missing");
            if (section[knob.key].IsNull()) return std::nullopt;
            const auto v = get<typename T::value_type>(section, path, knob.key);
            if constexpr (std::is_arithmetic_v<typename T::value_type>) {
                // The wording plan.yaml errors have always had for a cap.
                if (knob.has_floor && v < knob.at_least) fail(knob.name(), "must be positive");
            }
            return v;
        } else {
            const T v = get<T>(section, path, knob.key);
            if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
                if (knob.has_floor && v < knob.at_least) {
                    fail(knob.name(), knob.at_least == 0
                                          ? std::string("must not be negative")
                                          : "must be at least " + std::to_string(knob.at_least) +
                                                ", not " + std::to_string(v));
                }
            }
            return v;
        }
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
    const YAML::Node& doc = root;  // const: looking a section up never adds it
    // The sections in order, each with its keys.
    std::vector<std::pair<const PlanSection*, std::vector<std::string>>> sections;
    for_each_knob([&](const Knob& knob, const auto&) {
        if (sections.empty() || sections.back().first != knob.section) {
            sections.push_back({knob.section, {}});
        }
        sections.back().second.push_back(knob.key);
    });
    Plan p;
    const PlanSection* section = nullptr;
    YAML::Node node;
    bool absent = false;  // a section written before it existed: its knobs keep the defaults
    for_each_knob([&](const Knob& knob, const auto& field) {
        if (knob.section != section) {
            section = knob.section;
            absent = section->may_be_absent && !doc[section->name];
            const auto keys = std::find_if(sections.begin(), sections.end(),
                                           [&](const auto& s) { return s.first == section; });
            if (!absent) node.reset(r.section(doc, section->name, keys->second));
        }
        if (absent || (knob.may_be_absent && !node[knob.key])) return;
        field.of(p) = r.read<std::decay_t<decltype(field.of(p))>>(node, knob);
    });
    for (const auto& kv : doc) {
        const std::string key = kv.first.as<std::string>();
        if (std::none_of(sections.begin(), sections.end(),
                         [&](const auto& s) { return key == s.first->name; })) {
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
