#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/device/device_spec.h"
#include "loom/device/phase.h"

namespace loom {
namespace {

TEST(DeviceSpec, ParsesEveryForm) {
    EXPECT_EQ(parse_device_spec("cpu"), (DeviceSpec{DeviceKind::kCpu, 0}));
    EXPECT_EQ(parse_device_spec("sim"), (DeviceSpec{DeviceKind::kSim, 0}));
    EXPECT_EQ(parse_device_spec("cuda"), (DeviceSpec{DeviceKind::kCuda, 0}));
    EXPECT_EQ(parse_device_spec("cuda:3"), (DeviceSpec{DeviceKind::kCuda, 3}));
    EXPECT_EQ(parse_device_spec("cuda:3").to_string(), "cuda:3");
}

TEST(DeviceSpec, RejectsOthers) {
    for (const char* bad : {"gpu", "cuda:", "cuda:x", "CUDA", "cuda:-1", "mps", ""}) {
        try {
            parse_device_spec(bad);
            ADD_FAILURE() << bad;
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()),
                      "invalid device '" + std::string(bad) + "' (use cuda, cuda:N, cpu or sim)");
        }
    }
}

TEST(Phase, NamesRoundTrip) {
    for (Phase p : {Phase::kLoad, Phase::kCache, Phase::kProbe, Phase::kFirstSample, Phase::kSample,
                    Phase::kTrainStep, Phase::kSave}) {
        EXPECT_EQ(parse_phase(to_string(p)), p);
    }
    EXPECT_FALSE(parse_phase("training").has_value());
    EXPECT_EQ(phase_names(), "load, cache, probe, first_sample, sample, train_step, save");
}

}  // namespace
}  // namespace loom
