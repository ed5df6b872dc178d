#include "loom/train/preflight_probe.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "loom/core/byte_size.h"
#include "loom/core/logging.h"
#include "loom/device/device.h"
#include "loom/device/faults.h"
#include "loom/device/phase.h"
#include "loom/device/step_clock.h"
#include "loom/guard/event_log.h"
#include "loom/guard/guard.h"
#include "loom/train/training_step.h"

namespace loom {

namespace {

// Puts torch's CPU generator back as it was when the scope began, also when an OOM unwinds.
class RestoreRng {
  public:
    RestoreRng()
        : generator_(at::detail::getDefaultCPUGenerator()), state_(generator_.get_state()) {}
    ~RestoreRng() { restore(); }
    void restore() { generator_.set_state(state_); }
    RestoreRng(const RestoreRng&) = delete;
    RestoreRng& operator=(const RestoreRng&) = delete;

  private:
    at::Generator generator_;
    at::Tensor state_;
};

}  // namespace

PreflightProbe::PreflightProbe(guard::Guard& guard, guard::EventLog& events, Device& device,
                               TrainingStep& step, SamplingPass sampling)
    : guard_(guard),
      events_(events),
      device_(device),
      step_(step),
      sampling_(std::move(sampling)) {}

void PreflightProbe::run() {
    RestoreRng rng;
    const int oom_before = guard_.oom_count();
    std::string bucket;
    // Each part's peak is its own: the cache phase before it (encoders on the device, T5 at full
    // length for Flux) can peak higher than a step and would otherwise be reported as the step's.
    device_.reset_peak();
    guard_.run(
        Phase::kProbe, std::nullopt, [&] { bucket = step_.probe(guard_.plan()); },
        guard::Work::kTrain);
    rng.restore();
    const guard::Plan& plan = guard_.plan();
    const std::uint64_t train_peak = device_.stats().peak_allocated;
    events_.record("probe", {{"part", "train"},
                             {"result", "fits"},
                             {"bucket", bucket},
                             {"batch_size", plan.batch_size},
                             {"peak", train_peak},
                             {"ooms", guard_.oom_count() - oom_before},
                             {"plan", guard::describe(plan)}});
    logger("train").info("probe: a training step at {} x {} fits (peak {})", bucket,
                         plan.batch_size, format_bytes_human(train_peak));
    if (!guard_.plan().sample.enabled) return;
    const int sample_ooms_before = guard_.oom_count();
    device_.reset_peak();
    guard_.run(
        Phase::kProbe, std::nullopt, [&] { sampling_(guard_.plan()); }, guard::Work::kSample);
    rng.restore();
    events_.record("probe", {{"part", "sample"},
                             {"result", guard_.plan().sample.enabled ? "fits" : "disabled"},
                             {"peak", device_.stats().peak_allocated},
                             {"ooms", guard_.oom_count() - sample_ooms_before},
                             {"plan", guard::describe(guard_.plan())}});
}

guard::Measurement PreflightProbe::measure(const guard::Plan& candidate) {
    RestoreRng rng;
    device_.reset_peak();
    StepClock clock(device_);
    double fastest = 0.0;
    for (int run = 0; run < 2; ++run) {
        clock.start();
        {
            PhaseScope scope(Phase::kProbe, std::nullopt);
            step_.probe(candidate);
        }
        const double seconds = clock.seconds();
        rng.restore();
        fastest = run == 0 ? seconds : std::min(fastest, seconds);
    }
    guard::Measurement m;
    m.fits = true;
    m.peak = device_.stats().peak_allocated;
    m.step_seconds = (fastest + clock.micro_batch_seconds()) *
                     static_cast<double>(candidate.gradient_accumulation);
    m.clock = clock.name();
    return m;
}

void PreflightProbe::check(const guard::Plan& candidate) {
    RestoreRng rng;
    step_.probe(candidate);
    sampling_(candidate);
}

}  // namespace loom
