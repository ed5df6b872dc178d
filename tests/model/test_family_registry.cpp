// The families table (model/family_registry.h): a row for every family an arch names, each
// row's blocks the family's own, `loom eval`'s components found by name, and the arch of a path
// detected before anything is loaded.

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "loom/core/error.h"
#include "loom/model/chroma/chroma_family.h"
#include "loom/model/family_registry.h"
#include "loom/model/flux/flux_family.h"
#include "loom/model/qwenimage/qwenimage_family.h"
#include "loom/model/sd/sd_family.h"
#include "loom/model/wan/wan_family.h"
#include "loom/model/wan22/wan22_family.h"
#include "loom/model/zimage/zimage_family.h"
#include "temp_dir.h"

namespace loom {
namespace {

std::set<std::string> component_names(config::FamilyKind kind) {
    std::set<std::string> names;
    for (const EvalComponent& c : family_entry(kind).eval_components()) {
        EXPECT_TRUE(names.insert(c.name).second) << "twice: " << c.name;
        EXPECT_NE(std::string(c.help), "") << c.name;
    }
    return names;
}

TEST(FamilyTable, EveryArchsFamilyHasItsRow) {
    for (const config::ArchInfo& a : config::arch_table()) {
        EXPECT_EQ(family_entry(a.family).kind, a.family) << a.name;
    }
    EXPECT_EQ(family_table().size(), 7u);
}

TEST(FamilyTable, TheRowsBlocksAreTheFamilys) {
    EXPECT_EQ(&family_entry(config::FamilyKind::kFlux).blocks(), &FluxFamily::declared_blocks());
    EXPECT_EQ(&family_entry(config::FamilyKind::kWan).blocks(), &WanFamily::declared_blocks());
    EXPECT_EQ(&family_entry(config::FamilyKind::kWan22).blocks(), &Wan22Family::declared_blocks());
    EXPECT_EQ(&family_entry(config::FamilyKind::kChroma).blocks(),
              &ChromaFamily::declared_blocks());
    EXPECT_EQ(&family_entry(config::FamilyKind::kZImage).blocks(),
              &ZImageFamily::declared_blocks());
    EXPECT_EQ(&family_entry(config::FamilyKind::kQwenImage).blocks(),
              &QwenImageFamily::declared_blocks());
    EXPECT_EQ(family_entry(config::FamilyKind::kWan22).blocks().experts.size(), 2u);
    const DenoiserBlocks& flux = family_entry(config::FamilyKind::kFlux).blocks();
    EXPECT_EQ(flux.lora_targeting, LoRATargeting::kBlockLinears);
    EXPECT_TRUE(flux.contains("single_transformer_blocks.2.proj_mlp"));
    EXPECT_FALSE(flux.contains("x_embedder"));
    const DenoiserBlocks& sd = family_entry(config::FamilyKind::kStableDiffusion).blocks();
    EXPECT_EQ(&sd, &StableDiffusionFamily::declared_blocks());
    EXPECT_EQ(sd.lora_targeting, LoRATargeting::kUNetModuleSets);
    EXPECT_TRUE(sd.contains("mid_block.resnets.0.conv1"));
    EXPECT_FALSE(sd.contains("conv_in"));
}

TEST(FamilyTable, EachFamilyListsTheComponentsItsFoldersHold) {
    const std::set<std::string> sd = component_names(config::FamilyKind::kStableDiffusion);
    EXPECT_EQ(sd, (std::set<std::string>{"unet", "vae-encode", "vae-decode", "text-encoder",
                                         "text-encoder-2"}));
    const std::set<std::string> flux = component_names(config::FamilyKind::kFlux);
    EXPECT_EQ(flux, (std::set<std::string>{"transformer", "text-encoder-2", "prompt-embeds",
                                           "vae-encode", "vae-decode", "text-encoder"}));
    EXPECT_EQ(component_names(config::FamilyKind::kWan), (std::set<std::string>{"text-encoder"}));
    EXPECT_EQ(component_names(config::FamilyKind::kWan22),
              component_names(config::FamilyKind::kWan));
    EXPECT_EQ(component_names(config::FamilyKind::kChroma),
              (std::set<std::string>{"transformer", "text-encoder", "prompt-embeds", "vae-encode",
                                     "vae-decode"}));
}

TEST(EvalInputs, AMissingTensorNamesTheInputsFile) {
    const EvalInputs in("case.safetensors", {{"sample", at::zeros({1})}}, std::nullopt, 512);
    EXPECT_TRUE(in.get("sample").defined());
    EXPECT_FALSE(in.get("guidance", false).defined());
    try {
        in.get("timestep");
        FAIL() << "no error";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("case.safetensors"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("'timestep'"), std::string::npos) << e.what();
    }
}

TEST(DetectModelArch, AFolderOfAnotherPipelineIsRefusedNamingItsIndex) {
    test::TempDir dir;
    std::ofstream(dir / "model_index.json") << R"({"_class_name": "SomeOtherPipeline"})";
    try {
        detect_model_arch(dir.path());
        FAIL() << "no error";
    } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("model_index.json"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("SomeOtherPipeline"), std::string::npos) << e.what();
    }
    std::ofstream(dir / "model_index.json") << R"({"_class_name": "FluxPipeline"})";
    EXPECT_EQ(detect_model_arch(dir.path()), config::Arch::kFlux);
    // A FluxPipeline whose transformer takes Flex.2's 196 channels and gives 64 is Flex.2's.
    std::filesystem::create_directories(dir / "transformer");
    std::ofstream(dir / "transformer" / "config.json")
        << R"({"_class_name": "FluxTransformer2DModel", "in_channels": 196, "out_channels": 64})";
    EXPECT_EQ(detect_model_arch(dir.path()), config::Arch::kFlex2);
    std::ofstream(dir / "transformer" / "config.json")
        << R"({"_class_name": "FluxTransformer2DModel", "in_channels": 64})";
    EXPECT_EQ(detect_model_arch(dir.path()), config::Arch::kFlux);
}

}  // namespace
}  // namespace loom
