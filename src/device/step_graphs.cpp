#include "loom/device/step_graphs.h"

#include <set>

#include "cuda_step_graphs.h"
#include "loom/device/device.h"

namespace loom {

namespace {

// sim and cpu: nothing to capture; the work runs every time.
class EagerStepGraphs final : public StepGraphs {
  public:
    void run(const std::string&, const std::function<void()>& work) override { work(); }
    void clear() override {}
    bool captures() const override { return false; }
    std::size_t captured() const override { return 0; }
};

}  // namespace

std::unique_ptr<StepGraphs> make_step_graphs(Device& device) {
    if (device.spec().kind == DeviceKind::kCuda) return make_cuda_step_graphs(device);
    return std::make_unique<EagerStepGraphs>();
}

}  // namespace loom
