// default_store_path: LOOM_HOME, then XDG_DATA_HOME, then HOME; an empty variable counts as unset.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/store/store_location.h"

namespace loom::store {
namespace {

// Sets (or unsets, with nullopt) the three variables for one test and restores them after.
class Environment {
  public:
    Environment(std::optional<std::string> loom_home, std::optional<std::string> xdg_data_home,
                std::optional<std::string> home) {
        set("LOOM_HOME", loom_home);
        set("XDG_DATA_HOME", xdg_data_home);
        set("HOME", home);
    }
    ~Environment() {
        for (const Saved& s : saved_) apply(s.name, s.value);
    }
    Environment(const Environment&) = delete;
    Environment& operator=(const Environment&) = delete;

  private:
    struct Saved {
        const char* name;
        std::optional<std::string> value;
    };

    void set(const char* name, const std::optional<std::string>& value) {
        const char* old = ::getenv(name);
        saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
        apply(name, value);
    }
    static void apply(const char* name, const std::optional<std::string>& value) {
        if (value) {
            ::setenv(name, value->c_str(), 1);
        } else {
            ::unsetenv(name);
        }
    }

    std::vector<Saved> saved_;
};

TEST(DefaultStorePath, LoomHomeComesFirst) {
    Environment env("/srv/loom", "/data", "/home/u");
    EXPECT_EQ(default_store_path(), "/srv/loom/stable.db");
}

TEST(DefaultStorePath, XdgDataHomeWhenLoomHomeIsUnsetOrEmpty) {
    {
        Environment env(std::nullopt, "/data", "/home/u");
        EXPECT_EQ(default_store_path(), "/data/loom/stable.db");
    }
    Environment env("", "/data", "/home/u");
    EXPECT_EQ(default_store_path(), "/data/loom/stable.db");
}

TEST(DefaultStorePath, HomeLastOfAll) {
    Environment env(std::nullopt, "", "/home/u");
    EXPECT_EQ(default_store_path(), "/home/u/.local/share/loom/stable.db");
}

TEST(DefaultStorePath, NothingSetSaysWhatToDo) {
    Environment env(std::nullopt, std::nullopt, std::nullopt);
    try {
        default_store_path();
        FAIL() << "no error without LOOM_HOME, XDG_DATA_HOME and HOME";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "cannot place the stable store: none of LOOM_HOME, XDG_DATA_HOME or HOME is "
                  "set; set LOOM_HOME to a folder for loom's files or pass --store PATH");
    }
}

}  // namespace
}  // namespace loom::store
