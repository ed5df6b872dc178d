// The arch table (config/arch.h): one row per Arch in the enum's order, names that round-trip,
// the ai-toolkit names loom does not build recognised but not found, and the rows' facts that
// the layers above read instead of comparing arch strings.

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "loom/config/arch.h"
#include "loom/config/load.h"

namespace loom::config {
namespace {

TEST(ArchTable, OneRowPerArchInTheEnumsOrderAndNamesRoundTrip) {
    std::set<std::string> names;
    for (std::size_t i = 0; i < arch_table().size(); ++i) {
        const ArchInfo& row = arch_table()[i];
        EXPECT_EQ(static_cast<std::size_t>(row.arch), i) << row.name;
        EXPECT_EQ(&arch_info(row.arch), &row);
        EXPECT_EQ(find_arch(row.name), row.arch);
        EXPECT_STREQ(to_string(row.arch), row.name);
        EXPECT_TRUE(is_ai_toolkit_arch(row.name)) << row.name << " is not an ai-toolkit arch";
        EXPECT_TRUE(names.insert(row.name).second) << row.name << " twice";
        EXPECT_GT(row.bucket_divisibility, 0) << row.name;
    }
}

TEST(ArchTable, AiToolkitArchsLoomDoesNotBuildAreKnownButHaveNoRow) {
    for (const char* name :
         {"sd3", "chroma_radiance", "wan22_5b", "hidream_e1", "zimage_l2p", "flex1"}) {
        EXPECT_TRUE(is_ai_toolkit_arch(name)) << name;
        EXPECT_FALSE(find_arch(name).has_value()) << name;
    }
    EXPECT_FALSE(is_ai_toolkit_arch("sdxxl"));
    EXPECT_FALSE(find_arch("sdxxl").has_value());
}

TEST(ArchTable, RowsCarryWhatTheLayersAboveAsk) {
    EXPECT_TRUE(arch_info(Arch::kSdxl).two_text_encoders);
    EXPECT_FALSE(arch_info(Arch::kSd1).two_text_encoders);
    const ArchInfo& flux = arch_info(Arch::kFlux);
    EXPECT_TRUE(flux.trainable);
    EXPECT_EQ(flux.bucket_divisibility, 32);  // ai-toolkit's Flux divisibility
    EXPECT_EQ(flux.guidance, GuidanceKind::kDistilledEmbedding);
    EXPECT_EQ(flux.family, FamilyKind::kFlux);
    EXPECT_TRUE(arch_info(Arch::kWan21).video);
    EXPECT_FALSE(arch_info(Arch::kSdxl).video);
    EXPECT_FALSE(arch_info(Arch::kSd2).trainable);
    EXPECT_STREQ(arch_info(Arch::kSd1).lora_prefix, "unet");
    // Wan 2.1 and 2.2 14B: LoRA files in the original Wan names under diffusion_model., as
    // ai-toolkit writes them (convert_to_original) and ComfyUI maps them.
    EXPECT_STREQ(arch_info(Arch::kWan21).lora_prefix, "diffusion_model");
    const ArchInfo& wan22 = arch_info(Arch::kWan22_14b);
    EXPECT_EQ(wan22.family, FamilyKind::kWan22);
    EXPECT_TRUE(wan22.video && wan22.flow_matching && wan22.trainable);
    EXPECT_STREQ(wan22.lora_prefix, "diffusion_model");
    EXPECT_EQ(wan22.lora_module_names, LoRAModuleNames::kWanOriginal);
    EXPECT_EQ(arch_info(Arch::kWan21).lora_module_names, LoRAModuleNames::kWanOriginal);
    // Kontext: Flux's family and LoRA layout, the one arch whose datasets pair control images.
    const ArchInfo& kontext = arch_info(Arch::kFluxKontext);
    EXPECT_EQ(kontext.family, FamilyKind::kFlux);
    EXPECT_TRUE(kontext.control_images && kontext.trainable && kontext.flow_matching);
    EXPECT_EQ(kontext.guidance, GuidanceKind::kDistilledEmbedding);
    EXPECT_STREQ(kontext.lora_prefix, flux.lora_prefix);
    // The Edit archs read their controls in the prompt too; Edit-2509 takes up to three.
    for (const ArchInfo& row : arch_table()) {
        const bool edit = row.arch == Arch::kQwenImageEdit || row.arch == Arch::kQwenImageEditPlus;
        EXPECT_EQ(row.control_images,
                  row.arch == Arch::kFluxKontext || row.arch == Arch::kFlex2 || edit)
            << row.name;
        EXPECT_EQ(row.controls_in_prompt, edit) << row.name;
        EXPECT_EQ(row.max_control_images, row.arch == Arch::kQwenImageEditPlus ? 3 : 1) << row.name;
        if (edit) EXPECT_EQ(row.family, FamilyKind::kQwenImage) << row.name;
    }
    // Flex.2: Flux's family, pipeline class and LoRA layout; its folder tells it by its
    // transformer's channels (model/family.h detect_arch).
    const ArchInfo& flex2 = arch_info(Arch::kFlex2);
    EXPECT_EQ(flex2.family, FamilyKind::kFlux);
    EXPECT_STREQ(flex2.pipeline_class, "FluxPipeline");
    EXPECT_EQ(flex2.bucket_divisibility, 16);  // ai-toolkit's Flex2
    EXPECT_STREQ(flex2.lora_prefix, "transformer");
    // Chroma: its own family (no CLIP, real CFG), LoRA files in BFL's Flux names, as ai-toolkit.
    const ArchInfo& chroma = arch_info(Arch::kChroma);
    EXPECT_EQ(chroma.family, FamilyKind::kChroma);
    EXPECT_TRUE(chroma.trainable && chroma.flow_matching && !chroma.two_text_encoders);
    EXPECT_EQ(chroma.guidance, GuidanceKind::kClassifierFree);
    EXPECT_EQ(chroma.bucket_divisibility, 32);  // ai-toolkit's ChromaModel
    EXPECT_STREQ(chroma.lora_prefix, "diffusion_model");
    EXPECT_EQ(chroma.lora_module_names, LoRAModuleNames::kFluxOriginal);
    EXPECT_EQ(trainable_arch_list(),
              "sd1, sdxl, flux, wan21, wan22_14b, flux_kontext, chroma, flex2, zimage, qwen_image, "
              "qwen_image_edit, qwen_image_edit_plus");
}

TEST(ArchTable, PipelineClassesMapToTheirArchs) {
    EXPECT_EQ(archs_of_pipeline("FluxPipeline"), (std::vector<Arch>{Arch::kFlux, Arch::kFlex2}));
    EXPECT_EQ(archs_of_pipeline("FluxKontextPipeline"), std::vector<Arch>{Arch::kFluxKontext});
    // SD 1.x and 2.x share a pipeline class; the loader tells them apart by the text encoder.
    EXPECT_EQ(archs_of_pipeline("StableDiffusionPipeline"),
              (std::vector<Arch>{Arch::kSd1, Arch::kSd2}));
    EXPECT_EQ(archs_of_pipeline("QwenImagePipeline"), std::vector<Arch>{Arch::kQwenImage});
    EXPECT_EQ(archs_of_pipeline("QwenImageEditPipeline"), std::vector<Arch>{Arch::kQwenImageEdit});
    EXPECT_EQ(archs_of_pipeline("QwenImageEditPlusPipeline"),
              std::vector<Arch>{Arch::kQwenImageEditPlus});
    EXPECT_TRUE(archs_of_pipeline("HiDreamImagePipeline").empty());
    EXPECT_EQ(archs_of_pipeline("ChromaPipeline"), std::vector<Arch>{Arch::kChroma});
    EXPECT_EQ(archs_of_pipeline("ZImagePipeline"), std::vector<Arch>{Arch::kZImage});
    EXPECT_EQ(pipeline_class_list(),
              "StableDiffusionPipeline, StableDiffusionXLPipeline, FluxPipeline, WanPipeline, "
              "FluxKontextPipeline, ChromaPipeline, ZImagePipeline, QwenImagePipeline, "
              "QwenImageEditPipeline, QwenImageEditPlusPipeline");
}

// The loader resolves model.arch once: Choices::arch is the row's Arch for an arch loom builds,
// nullopt for one it does not, and legacy flags resolve the same way.
TEST(ArchTable, TheLoaderResolvesTheJobsArchOnce) {
    auto arch_of = [](const std::string& model) {
        const std::string yaml =
            "job: extension\nconfig:\n  name: a\n  process:\n    - type: sd_trainer\n"
            "      training_folder: out\n"
            "      datasets: [{folder_path: /data}]\n      model: " +
            model + "\n";
        return load_job_text(yaml, "arch.yaml").job.config.process.at(0).choices.arch;
    };
    EXPECT_EQ(arch_of("{name_or_path: m, arch: flux}"), Arch::kFlux);
    EXPECT_EQ(arch_of("{name_or_path: m, is_xl: true}"), Arch::kSdxl);
    EXPECT_EQ(arch_of("{name_or_path: m}"), Arch::kSd1);
    EXPECT_EQ(arch_of("{name_or_path: m, arch: 'wan21:14b'}"), Arch::kWan21);
    EXPECT_EQ(arch_of("{name_or_path: m, arch: chroma}"), Arch::kChroma);
    EXPECT_FALSE(arch_of("{name_or_path: m, arch: chroma_radiance}").has_value());
}

}  // namespace
}  // namespace loom::config
