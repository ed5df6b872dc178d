// `loom doctor`'s output (loom/doctor/diagnosis.h): the diagnosis for a terminal and as JSON.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

#include "log_text.h"
#include "loom/core/byte_size.h"
#include "loom/doctor/diagnosis.h"

namespace loom::doctor {

namespace {

using detail::contains;
using detail::plural;

// "  7: text" / " 31: text", numbers right-aligned, each note under its line.
void render_evidence(std::ostringstream& out, const std::vector<EvidenceLine>& evidence) {
    std::size_t width = 1;
    for (const EvidenceLine& e : evidence) width = std::max(width, std::to_string(e.line).size());
    for (const EvidenceLine& e : evidence) {
        const std::string number = std::to_string(e.line);
        out << std::string(2 + width - number.size(), ' ') << number << ": " << e.text << "\n";
        if (!e.note.empty()) out << std::string(width + 4, ' ') << "-> " << e.note << "\n";
    }
}

void render_figures(std::ostringstream& out, const OomFigures& f) {
    if (f.empty()) return;
    out << "\nfigures (line " << f.line << "):\n";
    auto row = [&](const char* label, const std::string& value) {
        out << "  " << label << std::string(24 - std::string(label).size(), ' ') << value << "\n";
    };
    if (f.requested) row("tried to allocate", format_bytes_human(*f.requested));
    if (f.free) {
        row("free", format_bytes_human(*f.free) +
                        (f.total ? " of " + format_bytes_human(*f.total) : std::string()));
    } else if (f.total) {
        row("total capacity", format_bytes_human(*f.total));
    }
    if (f.allocated) row("allocated by PyTorch", format_bytes_human(*f.allocated));
    if (f.reserved) row("reserved by PyTorch", format_bytes_human(*f.reserved) + " in total");
    if (f.reserved_unallocated) {
        row("reserved, unallocated", format_bytes_human(*f.reserved_unallocated));
    }
    if (f.this_process) row("this process", format_bytes_human(*f.this_process) + " in use");
    for (const OomFigures::Process& p : f.processes) {
        row(("process " + p.pid).c_str(), format_bytes_human(p.bytes) + " in use");
    }
}

}  // namespace

std::string render(const Diagnosis& d) {
    std::ostringstream out;
    out << "loom doctor: " << d.source_name << " (" << to_string(d.tool) << " log, "
        << plural(static_cast<std::int64_t>(d.line_count), "line") << ")\n\n";
    out << "case:  " << to_string(d.log_case) << " - " << d.title << "\n";
    out << "why:   " << d.reason << "\n";
    if (!d.found_oom()) {
        if (!d.evidence.empty()) out << "\n";
        render_evidence(out, d.evidence);
        return out.str();
    }
    const bool guide_case = d.log_case != LogCase::kHostRam && !contains(d.cause, "guide §");
    out << "cause: " << d.cause << (guide_case ? " (guide §4)" : "") << "\n";
    out << "\nfirst change:\n  " << d.first_change << "\n";
    if (!d.further_changes.empty()) {
        out << "then, one at a time:\n";
        for (std::size_t i = 0; i < d.further_changes.size(); ++i) {
            out << "  " << i + 2 << ". " << d.further_changes[i] << "\n";
        }
    }
    out << "\nevidence:\n";
    render_evidence(out, d.evidence);
    render_figures(out, d.figures);
    if (!d.loom_changes.empty()) {
        out << "\nloom already changed (it recovers by itself):\n";
        // One line per plan change: the knobs one change turned (batch and accumulation, a level
        // and its streamed blocks) share their log line and rule.
        for (std::size_t i = 0; i < d.loom_changes.size(); ++i) {
            const LoomChange& c = d.loom_changes[i];
            out << "  line " << c.line << ": " << c.knob << " " << c.from << " -> " << c.to;
            while (i + 1 < d.loom_changes.size() && d.loom_changes[i + 1].line == c.line &&
                   d.loom_changes[i + 1].rule == c.rule) {
                const LoomChange& more = d.loom_changes[++i];
                out << ", " << more.knob << " " << more.from << " -> " << more.to;
            }
            if (!c.rule.empty()) out << " (rule: " << c.rule << ")";
            if (!c.phase.empty()) {
                out << ", after the OOM in " << c.phase;
                if (c.step) out << " at step " << *c.step;
            }
            out << "\n";
        }
    }
    if (!d.loom_outcome.empty()) out << "\nloom outcome: " << d.loom_outcome << "\n";
    if (!d.loom_recovered.empty()) out << "\nloom recovered: " << d.loom_recovered << "\n";
    return out.str();
}

std::string render_json(const Diagnosis& d) {
    using Json = nlohmann::ordered_json;
    Json j;
    j["source"] = d.source_name;
    j["tool"] = to_string(d.tool);
    j["lines"] = d.line_count;
    j["case"] = to_string(d.log_case);
    j["title"] = d.title;
    j["moment"] = d.moment;
    j["phase"] = d.phase;
    j["cause"] = d.cause;
    j["reason"] = d.reason;
    j["first_change"] = d.first_change;
    j["further_changes"] = d.further_changes;
    j["oom_step"] = d.oom_step ? Json(*d.oom_step) : Json();
    j["oom_count"] = d.oom_count;
    j["evidence"] = Json::array();
    for (const EvidenceLine& e : d.evidence) {
        j["evidence"].push_back({{"line", e.line}, {"text", e.text}, {"note", e.note}});
    }
    Json f = Json::object();
    auto put = [&](const char* key, const std::optional<std::uint64_t>& v) {
        if (v) f[key] = *v;
    };
    put("requested", d.figures.requested);
    put("free", d.figures.free);
    put("total", d.figures.total);
    put("allocated", d.figures.allocated);
    put("reserved", d.figures.reserved);
    put("reserved_unallocated", d.figures.reserved_unallocated);
    put("this_process", d.figures.this_process);
    for (const OomFigures::Process& p : d.figures.processes) {
        f["processes"].push_back({{"pid", p.pid}, {"bytes", p.bytes}});
    }
    if (!d.figures.empty()) f["line"] = d.figures.line;
    j["figures"] = f;
    j["loom_changes"] = Json::array();
    for (const LoomChange& c : d.loom_changes) {
        j["loom_changes"].push_back({{"line", c.line},
                                     {"knob", c.knob},
                                     {"from", c.from},
                                     {"to", c.to},
                                     {"rule", c.rule},
                                     {"phase", c.phase},
                                     {"step", c.step ? Json(*c.step) : Json()}});
    }
    j["loom_outcome"] = d.loom_outcome;
    j["loom_recovered"] = d.loom_recovered;
    return j.dump(2) + "\n";
}

}  // namespace loom::doctor
