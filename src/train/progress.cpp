#include "loom/train/progress.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "loom/core/byte_size.h"
#include "loom/core/format.h"
#include "loom/core/logging.h"
#include "train_log.h"

namespace loom {

namespace {

double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

std::string format_eta(double seconds) {
    const auto s = static_cast<long long>(seconds);
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%02lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
    return buf;
}

Progress::Progress(std::filesystem::path metrics_file, std::int64_t total_steps, bool tty,
                   int log_every)
    : metrics_file_(std::move(metrics_file)),
      total_steps_(total_steps),
      tty_(tty),
      log_every_(std::max(1, log_every)),
      started_(steady_seconds()) {}

void Progress::write_metrics(const StepReport& r) {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    nlohmann::json line = {{"step", r.step},
                           {"time", now},
                           {"loss", r.loss},
                           {"lr", r.lr},
                           {"step_seconds", r.seconds},
                           {"buckets", r.buckets},
                           {"allocated", r.memory.allocated},
                           {"peak_allocated", r.memory.peak_allocated},
                           {"reserved", r.memory.reserved},
                           {"peak_reserved", r.memory.peak_reserved},
                           {"phases",
                            {{"data", r.times.data},
                             {"forward", r.times.forward},
                             {"backward", r.times.backward},
                             {"optimizer", r.times.optimizer},
                             {"sync", r.times.sync}}}};
    if (r.modelled_seconds) line["modelled_seconds"] = *r.modelled_seconds;
    if (metrics_file_.empty()) return;  // a rank other than 0 of a data-parallel run
    if (!metrics_.is_open()) metrics_.open(metrics_file_, std::ios::app);
    metrics_ << line.dump() << "\n";
    metrics_.flush();  // a killed run keeps every finished step's line
}

void Progress::step_done(const StepReport& r) {
    ++reported_;
    write_metrics(r);
    const double elapsed = steady_seconds() - started_;
    const double rate = static_cast<double>(reported_) / std::max(elapsed, 1e-9);
    const std::string line =
        format("step {}/{} loss {:.4f} lr {:.2e} {:.2f} it/s mem {} ETA {}", r.step, total_steps_,
               r.loss, r.lr, rate, format_bytes_human(r.memory.allocated),
               format_eta(static_cast<double>(total_steps_ - r.step) / std::max(rate, 1e-9)));
    if (tty_) {
        std::fprintf(stderr, "\r%s   ", line.c_str());
        if (r.step == total_steps_) std::fprintf(stderr, "\n");
    } else if (r.step % log_every_ == 0 || r.step == total_steps_ || reported_ == 1) {
        train_log().info("{}", line);
    }
}

}  // namespace loom
