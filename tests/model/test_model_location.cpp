// model.name_or_path as a folder or a hub id in the local Hugging Face cache: the caches in
// huggingface_hub's order, refs/main to the snapshot, and one error naming the folders searched
// and the download command when the model is not there. The environment is injected.

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "loom/core/error.h"
#include "loom/model/loading/model_location.h"
#include "temp_dir.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

EnvironmentLookup environment(std::map<std::string, std::string> vars) {
    return [vars](const std::string& name) -> std::optional<std::string> {
        const auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

// A cached snapshot of `id` at `revision` in `cache`, with refs/main naming it when `ref`.
fs::path cache_model(const fs::path& cache, const std::string& org, const std::string& name,
                     const std::string& revision, bool ref = true) {
    const fs::path repo = cache / ("models--" + org + "--" + name);
    const fs::path snapshot = repo / "snapshots" / revision;
    fs::create_directories(snapshot);
    std::ofstream(snapshot / "model_index.json") << "{}";
    if (ref) {
        fs::create_directories(repo / "refs");
        std::ofstream(repo / "refs" / "main") << revision << "\n";
    }
    return snapshot;
}

std::string error_of(const std::string& name, const EnvironmentLookup& env) {
    try {
        locate_model(name, env);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(ModelLocation, HubIdShape) {
    EXPECT_TRUE(is_hub_id("black-forest-labs/FLUX.1-dev"));
    EXPECT_TRUE(is_hub_id("stabilityai/stable-diffusion-xl-base-1.0"));
    EXPECT_FALSE(is_hub_id("/models/flux"));
    EXPECT_FALSE(is_hub_id("models/sd/tiny"));
    EXPECT_FALSE(is_hub_id("./flux"));
    EXPECT_FALSE(is_hub_id("../x/y"));
    EXPECT_FALSE(is_hub_id("flux"));
}

TEST(ModelLocation, CachesInHuggingfaceHubsOrder) {
    const auto caches = hub_cache_folders(environment(
        {{"HF_HUB_CACHE", "/a"}, {"HF_HOME", "/b"}, {"XDG_CACHE_HOME", "/c"}, {"HOME", "/d"}}));
    EXPECT_EQ(caches, (std::vector<fs::path>{"/a", "/b/hub", "/c/huggingface/hub",
                                             "/d/.cache/huggingface/hub"}));
}

TEST(ModelLocation, AnExistingFolderWinsOverTheCache) {
    test::TempDir dir;
    fs::create_directories(dir / "org" / "name");
    const fs::path local = dir / "org" / "name";
    EXPECT_EQ(locate_model(local.string(), environment({})), local);
}

TEST(ModelLocation, AHubIdResolvesToItsSnapshotThroughRefsMain) {
    test::TempDir dir;
    cache_model(dir / "old", "black-forest-labs", "FLUX.1-dev", "aaa");
    const fs::path want =
        cache_model(dir / "home" / "hub", "black-forest-labs", "FLUX.1-dev", "bbb");
    cache_model(dir / "home" / "hub", "black-forest-labs", "FLUX.1-dev", "ccc",
                false);  // unreferenced
    // HF_HOME's cache: refs/main names bbb among two snapshots.
    EXPECT_EQ(locate_model("black-forest-labs/FLUX.1-dev",
                           environment({{"HF_HOME", (dir / "home").string()}})),
              want);
    // HF_HUB_CACHE comes first.
    EXPECT_EQ(locate_model("black-forest-labs/FLUX.1-dev",
                           environment({{"HF_HUB_CACHE", (dir / "old").string()},
                                        {"HF_HOME", (dir / "home").string()}})),
              dir / "old" / "models--black-forest-labs--FLUX.1-dev" / "snapshots" / "aaa");
    // Without refs/main a single snapshot is the one.
    const fs::path only = cache_model(dir / "single", "org", "m", "rev1", false);
    EXPECT_EQ(locate_model("org/m", environment({{"HF_HUB_CACHE", (dir / "single").string()}})),
              only);
}

TEST(ModelLocation, AMissingHubIdNamesTheFoldersSearchedAndTheDownloadCommand) {
    test::TempDir dir;
    const std::string e = error_of(
        "black-forest-labs/FLUX.1-schnell",
        environment({{"HF_HUB_CACHE", (dir / "a").string()}, {"HOME", (dir / "h").string()}}));
    EXPECT_NE(e.find((dir / "a" / "models--black-forest-labs--FLUX.1-schnell").string()),
              std::string::npos)
        << e;
    EXPECT_NE(e.find((dir / "h" / ".cache" / "huggingface" / "hub").string()), std::string::npos)
        << e;
    EXPECT_NE(e.find("huggingface-cli download black-forest-labs/FLUX.1-schnell"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("does not download"), std::string::npos) << e;
    // A path that is not a hub id: no such folder.
    EXPECT_NE(error_of("/nowhere/at/all", environment({})).find("no such model folder"),
              std::string::npos);
}

TEST(ModelLocation, ARefToAMissingSnapshotIsAnErrorNamingTheRef) {
    test::TempDir dir;
    const fs::path repo = dir / "models--org--m";
    fs::create_directories(repo / "refs");
    fs::create_directories(repo / "snapshots");
    std::ofstream(repo / "refs" / "main") << "deadbeef\n";
    const std::string e = error_of("org/m", environment({{"HF_HUB_CACHE", dir.path().string()}}));
    EXPECT_NE(e.find((repo / "refs" / "main").string()), std::string::npos) << e;
    EXPECT_NE(e.find("deadbeef"), std::string::npos) << e;
}

}  // namespace
}  // namespace loom
