// The model layer's arch registry and the config layer's list of ai-toolkit archs agree on what
// loom trains.

#include <gtest/gtest.h>

#include "loom/config/arch.h"
#include "loom/model/stable_diffusion.h"

namespace loom {
namespace {

TEST(ArchRegistry, TrainableArchsAgreeWithTheConfigSchema) {
    for (const ArchSpec& spec : arch_registry()) {
        const config::ArchName* name = config::find_arch(spec.name);
        ASSERT_NE(name, nullptr) << spec.name << " is not an ai-toolkit arch name";
        EXPECT_EQ(name->trainable, spec.trainable) << spec.name;
    }
    for (const config::ArchName& name : config::known_archs()) {
        if (!name.trainable) continue;
        const ArchSpec* spec = find_arch_spec(name.name);
        ASSERT_NE(spec, nullptr) << name.name << " is trainable in the schema but not registered";
        EXPECT_TRUE(spec->trainable);
    }
}

TEST(ArchRegistry, SdxlHasTwoTextEncoders) {
    EXPECT_TRUE(find_arch_spec("sdxl")->two_text_encoders);
    EXPECT_FALSE(find_arch_spec("sd1")->two_text_encoders);
    const ArchSpec* flux = find_arch_spec("flux");
    ASSERT_NE(flux, nullptr);
    EXPECT_TRUE(flux->trainable);
    EXPECT_TRUE(flux->two_text_encoders);
    EXPECT_EQ(flux->bucket_divisibility, 32);  // ai-toolkit's Flux divisibility
}

}  // namespace
}  // namespace loom
